package tuner

import (
	"math"
	"runtime"
	"time"

	"github.com/torchd/torchd/handlers"
	"github.com/torchd/torchd/torch"
)

const (
	// startFrac bounds one worker's starting batch: the largest measured batch with at least
	// this fraction of the best throughput (see limits).
	startFrac = 0.8

	curveBudget   = 5 * time.Second        // the most a curve measurement may take
	curveCheap    = 500 * time.Millisecond // a first pass whose forwards cost this little (at their fastest) measures on to maxBatch
	curveRefine   = time.Second            // more passes while the passes together fit in this
	curveMaxBatch = 64
)

// Point is one measured batch size: its forward time and throughput.
type Point struct {
	Batch     int     `json:"batch"`
	ForwardMS float64 `json:"forwardMs"`
	PerSecond float64 `json:"itemsPerSecond"`
}

type curve struct {
	Points  []Point `json:"points"`
	Threads int     `json:"threads"`
	Took    float64 `json:"measureSeconds"`
	// SingleThreadMS is the forward time at the throughput-optimal batch on one thread,
	// measured for workers = "auto" (0 otherwise).
	SingleThreadMS float64 `json:"singleThreadMs,omitempty"`
}

// forward returns the measured (or interpolated) forward time of a batch of b.
func (c *curve) forward(b int) time.Duration {
	p := c.Points
	if len(p) == 0 {
		return 0
	}
	for i, pt := range p {
		if pt.Batch >= b {
			if i == 0 || pt.Batch == b {
				return time.Duration(pt.ForwardMS * float64(time.Millisecond))
			}
			lo := p[i-1]
			f := float64(b-lo.Batch) / float64(pt.Batch-lo.Batch)
			return time.Duration((lo.ForwardMS + f*(pt.ForwardMS-lo.ForwardMS)) * float64(time.Millisecond))
		}
	}
	last := p[len(p)-1]
	return time.Duration(last.ForwardMS * float64(b) / float64(last.Batch) * float64(time.Millisecond))
}

// bestBatch is the smallest batch within 10% of the best throughput: the knee of the curve.
// Past it a bigger batch buys little in the forward and costs the overlap of HTTP work with
// the forward under load; the tuner moves from there by what is served.
func (c *curve) bestBatch() int {
	if b := c.plateau(0.9); len(b) > 0 {
		return b[0]
	}
	return 1
}

// plateau lists the measured batches with at least frac of the best throughput, smallest
// first.
func (c *curve) plateau(frac float64) []int {
	top := 0.0
	for _, p := range c.Points {
		top = math.Max(top, p.PerSecond)
	}
	var b []int
	for _, p := range c.Points {
		if p.PerSecond >= frac*top {
			b = append(b, p.Batch)
		}
	}
	return b
}

// limits are the batch limit to start from and the most the tuner may probe up to.
// The cap is twice the largest measured batch (the curve stops where its throughput stops
// growing, but serving has per-batch costs the forward alone does not show), at most
// maxBatch, and with a latency target the largest batch of the ladder whose forward fits
// twice in the target (a request may wait for the batch in flight, then run in its own).
// The start, under the cap, is the largest batch within startFrac of the best for one
// worker, and the knee for several.
//
// The forward alone cannot tell the batches of a plateau apart (its noise is about the
// plateau's width), and serving can at both ends. Of the rules measured end to end, the
// largest within startFrac served best (docs/design/self-tuning.md, "The starting point").
func (c *curve) limits(target time.Duration, maxBatch, workers int) (start, limit int) {
	limit = 1
	if n := len(c.Points); n > 0 {
		for b := 1; b <= min(maxBatch, 2*c.Points[n-1].Batch); b *= 2 {
			if target > 0 && 2*c.forward(b) > target {
				break
			}
			limit = b
		}
	}
	start = c.bestBatch()
	if workers == 1 {
		for _, b := range c.plateau(startFrac) {
			if b <= limit {
				start = max(start, b)
			}
		}
	}
	return min(start, limit), limit
}

// measureCurve times the forward of 1, 2, 4, … copies of sample on a locked OS thread
// with the given intra-op threads.
//
// A first pass times each batch size in turn: two forwards at the new shape for
// TorchScript's profiling executor (it profiles one run and optimizes on the next), then the
// fastest of at least three timed ones (up to 30 ms of them, at most 50, for a fast model):
// the minimum is what the model costs, and noise only ever adds to it. The pass stops at
// maxBatch, when a forward alone breaks the latency target, when the next (twice as long)
// forwards would pass the budget, or, once the pass's forwards have cost curveCheap, when
// throughput has stopped growing twice: a cheap model is measured to maxBatch, since its
// throughput may dip and rise again (a kernel library may pick a slower path for one batch
// size, and on a busy machine the batches whose kernels use several threads wait for the
// thread that is not running). Their cost is their count times the fastest: the time the pass
// takes on the machine, busy with other work, would stop a cheap model's pass at the dip.
// Then more passes time every measured size again, each size keeping its fastest: a
// disturbance of the machine (another process, a model loading next to it) lasts a moment,
// and interleaved passes keep it from skewing one size against the others. Passes go on
// while they together stay within curveRefine; a slow model gets one more if it fits in the
// budget.
func measureCurve(run func([]*handlers.Sample) error, sample *handlers.Sample, threads, maxBatch int, target time.Duration) (*curve, error) {
	c := &curve{Threads: threads}
	var err error
	onThread(threads, func() {
		start := time.Now()
		var batches [][]*handlers.Sample
		var best []time.Duration
		// timeBatch runs skip untimed forwards and then timed ones, and returns the fastest
		// and how many forwards it ran.
		timeBatch := func(batch []*handlers.Sample, skip int) (time.Duration, int) {
			fastest := time.Duration(math.MaxInt64)
			var spent time.Duration
			i := 0
			for ; i < skip+3 || (spent < 30*time.Millisecond && i < skip+50); i++ {
				t0 := time.Now()
				if err = run(batch); err != nil {
					return 0, i
				}
				if d := time.Since(t0); i >= skip {
					fastest, spent = min(fastest, d), spent+d
				}
			}
			return fastest, i
		}
		flat, top := 0, 0.0
		var cost time.Duration // the pass's forwards, each at the fastest of its size
		for b := 1; b <= maxBatch; b *= 2 {
			batch := make([]*handlers.Sample, b)
			for i := range batch {
				batch[i] = sample
			}
			d, n := timeBatch(batch, 2)
			if err != nil {
				return
			}
			cost += time.Duration(n) * d
			batches, best = append(batches, batch), append(best, d)
			if rate := float64(b) / d.Seconds(); rate < 1.03*top {
				flat++
			} else {
				flat, top = 0, rate
			}
			if flat >= 2 && cost > curveCheap || (target > 0 && d > target) || time.Since(start)+10*d > curveBudget {
				break
			}
		}
		// A pass again costs four forwards of each size (more for a fast model, and the
		// first pass's own length bounds that).
		pass := time.Since(start)
		var again time.Duration
		for _, d := range best {
			again += 4 * d
		}
		for n := 1; time.Since(start)+pass <= curveRefine || n == 1 && time.Since(start)+again <= curveBudget; n++ {
			for i, batch := range batches {
				d, _ := timeBatch(batch, 1)
				if err != nil {
					return
				}
				best[i] = min(best[i], d)
			}
		}
		for i, batch := range batches {
			c.Points = append(c.Points, Point{Batch: len(batch), ForwardMS: float64(best[i]) / float64(time.Millisecond),
				PerSecond: float64(len(batch)) / best[i].Seconds()})
		}
		c.Took = time.Since(start).Seconds()
	})
	c.monotone()
	return c, err
}

// monotone corrects the curve for noise: a bigger batch never takes less time, and noise
// only adds time, so a batch costs at most what any bigger batch was measured at.
func (c *curve) monotone() {
	for i := len(c.Points) - 2; i >= 0; i-- {
		p, next := &c.Points[i], c.Points[i+1]
		if next.ForwardMS < p.ForwardMS {
			p.ForwardMS = next.ForwardMS
			p.PerSecond = float64(p.Batch) / (p.ForwardMS / 1e3)
		}
	}
}

// onThread runs f on a new locked OS thread with n intra-op threads; the thread ends with it.
func onThread(n int, f func()) {
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		torch.SetNumThreadsHere(n)
		f()
		close(done)
	}()
	<-done
}
