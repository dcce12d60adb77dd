package tuner

// Self-tuning batching: batch_size, max_batch_delay and workers may be "auto".
//
// At load, torchd measures the model's forward time against batch size on its device and
// thread setting, with the warm-up input replicated (1, 2, 4, … requests), in a bounded
// number of forwards: it stops at max_batch, when a forward alone would break the latency
// target, when the measuring budget would be spent, or (a slow model) when throughput has
// stopped growing; a cheap model gets interleaved passes (see measureCurve). The curve is
// cached per model file, device, threads and input shape.
//
// From the curve: the starting batch limit of one worker is the largest batch within 20% of
// the best measured throughput (see limits); with several workers it is the knee (the
// smallest within 10%), since their batches fill by lingering. The tuner may move it up to
// a cap (twice the largest measured batch, and with a latency target the largest whose
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
// tuned on what is served: the tuner tries the neighbouring limit for a window and keeps it
// only if it served measurably more, or, with a latency target, if it keeps p99 within the
// target (see tuner). When the model's intra-op threads are not set, the workers' threads
// are tuned the same way: cores / workers, or one (see dirThreads).
