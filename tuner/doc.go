// Package tuner is torchd's self-tuning batching: a model's batch_size, max_batch_delay and
// workers may be "auto", and the workers' intra-op threads follow when they are not set.
//
// At load, New measures the model's forward time against batch size on its device and
// thread setting, with the warm-up input replicated (1, 2, 4, … requests), in a bounded
// number of forwards: it stops at max_batch, when a forward alone would break the latency
// target, when the measuring budget would be spent, or (a slow model) when throughput has
// stopped growing; a cheap model gets interleaved passes (see measureCurve). The curve is
// cached per model file, device, threads and input shape.
//
// From the curve: the starting batch limit of one worker is the largest batch within
// startFrac of the best measured throughput (see limits); with several workers it is the
// knee (see bestBatch), since their batches fill by lingering. The tuner may move it up to a
// cap (twice the largest measured batch, and with a latency target the largest whose
// forward fits twice in the target).
//
// While serving, batches are formed greedily: a free worker takes what is queued, up to the
// limit, so at low load a request runs alone at once (the lowest latency at the offered
// load) and under load batches grow with the queue. With one worker the delay starts at 0
// (requests that arrive during a forward queue anyway), and lingering is one of the probes:
// in a closed loop whose clients answer in bursts, waiting for the stragglers fills the
// batch. With several workers, an idle worker would split the arrivals into small batches,
// so the delay becomes the time the queue takes to fill the batch at the measured arrival
// rate, at most a forward's time divided by the workers.
//
// The forward alone does not say which limit serves best: per-batch costs (dispatch,
// concatenation, waking the requests) favour bigger batches, and the overlap of the HTTP
// work with the forward favours batches smaller than the queue. So under load the limit is
// tuned on what is served: the Tuner tries the neighbouring limit for a window and keeps it
// only if it served measurably more, or, with a latency target, if it keeps p99 within the
// target (see Tuner). When the model's intra-op threads are not set, the workers' threads
// are tuned the same way: cores / workers, or one (see dirThreads).
//
// The package talks to the serving core through Target alone (set the batching, set the
// threads, read the dispatch counters), and the core through the Tuner's methods alone. One
// concept per file:
//
//	curve.go   the batch-size/forward-time curve and its measurement
//	cache.go   the curves' disk cache
//	window.go  the measuring windows: meter, window, the latency ring, noise statistics
//	rules.go   the decision rules: which neighbours are probed, and how a probe is judged
//	levels.go  load levels: a change of load, and what is remembered per level
//	tuner.go   the Tuner, its constants and its run loop
//	step.go    the probe state machine: what one window changes
//	setup.go   New: the settings filled in from the curve
//	status.go  describe's view
//
// The rules' reasons and the figures that chose them are in docs/design/self-tuning.md.
package tuner
