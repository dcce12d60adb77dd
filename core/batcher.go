package core

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/torchd/torchd/handlers"
)

// job is one request waiting for inference.
type job struct {
	sample   *handlers.Sample
	explain  *explanation // nil: a forward
	rsv      *reservation // its place in the queue and the window; nil: none (tests)
	place    atomic.Int32 // placeReserved, placeQueued, placeAbandoned or placeFreed
	enqueued time.Time
	deadline time.Time   // zero: none
	gone     func() bool // reports a disconnected client; nil: never
	trace    Trace       // nil: untraced
	done     chan Result
}

// Result is a request's answer: its share of the batch it ran in, the handler's response,
// and its time in each stage.
type Result struct {
	Version *ModelVersion // the version that served it; nil: none was found
	// Sample is the request's preprocessed input (nil: it failed before).
	Sample *handlers.Sample
	// Out is the request's share of the batch output: its rows of each output tensor.
	Out []handlers.Tensor
	// Response is the handler's answer: its Postprocess, or its explanation. nil for a Raw
	// request and for an input that went straight to the model.
	Response *handlers.Response

	err       error
	Input     time.Duration // arrival → enqueue: decoding and preprocessing
	Queued    time.Duration // enqueue → batch dispatch
	Inference time.Duration // the batched forward
	BatchSize int           // requests in the batch this one ran in (0: it reached none)

	dispatched time.Time // when its batch was dispatched (zero: it reached none), for its trace
}

// queuedFor is how long j has waited by now: in the queue, and before that for its place in
// the window (its preprocessing, counted as such, in between is not).
func (j *job) queuedFor(now time.Time) time.Duration {
	d := now.Sub(j.enqueued)
	if j.rsv != nil {
		d += j.rsv.waited
	}
	return d
}

// finish answers j; done has capacity 1, so it never blocks. The request's input is no
// longer needed by the batcher, so its place in the window goes to the next request, and
// its tensors back to their pool (Sample.Release): every finish is made by the job's last
// reader, a worker done with its batch or the one that dropped it unrun.
func (j *job) finish(r Result) {
	if s := j.sample; s != nil && s.Release != nil {
		s.Release()
	}
	// The place goes back before the answer, so that a client holding its answer never
	// sees its own request still counted in the window.
	j.leaveWindow()
	j.done <- r
}

// leaveWindow gives j's window place back, once: when j is answered, or when its request
// stops waiting for it (a 504 while its batch is stuck in a forward must not keep the place
// from the requests the replacement worker serves).
func (j *job) leaveWindow() {
	if r := j.rsv; r != nil && r.win != nil && r.left.CompareAndSwap(false, true) {
		r.win.leave()
	}
}

// A job's queue place: its reservation holds it until the job enters the queue; then the
// job holds it until a worker takes the job or its request stops waiting (its deadline), so
// a request already answered 504 never keeps a later one out of the queue.
const (
	placeReserved  int32 = iota // its reservation's, not yet queued
	placeQueued                 // in the queue, counted in held
	placeAbandoned              // its request left before it was queued: push gives the place back
	placeFreed                  // given back
)

// Batcher is a model version's bounded request queue and its batch formation. A batch takes
// up to batchSize requests and waits at most maxDelay, counted from the arrival of its oldest
// request; it goes the moment it is full, or, with dispatchAlone, the moment it holds every
// request its model has (none other admitted, queued or in a running batch): then no
// company can come but from new clients, and a lone client would wait maxDelay for nothing.
type Batcher struct {
	// queue has room for twice the queue's size: jobs whose requests left (abandoned) stay
	// in it until a worker drops them, but no longer count against size.
	queue chan *job
	size  int64
	// aggregate is held by the one worker forming a batch, so batches fill in arrival order
	// instead of being split across idle workers. It is a channel, not a mutex, because the
	// holder may wait on an empty queue indefinitely: a worker being stopped must be able to
	// give up waiting for it.
	aggregate chan struct{}
	batchSize atomic.Int64
	maxDelay  atomic.Int64 // time.Duration
	// preferred are the batch sizes formed first, ascending (Triton's preferred_batch_size);
	// nil: none.
	preferred atomic.Pointer[[]int]
	// whole is the forward size that a batch going at once beside a running one is taken in
	// multiples of (SetWhole); 0: whatever is queued.
	whole atomic.Int64
	// closed is set when the model is unregistered; Submit then refuses.
	closed atomic.Bool
	// held counts the queue places taken: requests admitted and being decoded, and jobs
	// queued whose requests still wait. queued counts the latter.
	held, queued atomic.Int64
	// win bounds the requests holding preprocessed input and keeps their arrival order.
	win     inputWindow
	workers atomic.Int64

	// dispatchAlone sends a batch that holds every request of its model at once instead of
	// waiting maxDelay (the server's batch_delay_alone = false). Set before the first worker.
	dispatchAlone bool
	// running counts the batches dispatched and not yet done (see done).
	running atomic.Int64

	batches    atomic.Int64 // batches dispatched
	batchItems atomic.Int64 // requests dispatched in them
	busy       atomic.Int64 // nanoseconds the workers spent running batches (see WorkerPool.runBatch)
	inPlace    atomic.Int64 // batches run where their inputs lay (rows.go)

	markMu sync.Mutex
	mark   dispatchMark // the latest dispatch
}

// dispatchMark is a dispatch: its time, and the batches and requests dispatched before it.
// Two marks give a rate over whole batches.
type dispatchMark struct {
	at              time.Time
	batches, before int64
}

// last returns the latest dispatch's mark (zero before the first).
func (b *Batcher) last() dispatchMark {
	b.markMu.Lock()
	defer b.markMu.Unlock()
	return b.mark
}

// NewBatcher returns a batcher with a queue of queueSize requests.
func NewBatcher(queueSize, batchSize int, maxDelay time.Duration) *Batcher {
	queueSize = max(queueSize, 1)
	b := &Batcher{queue: make(chan *job, 2*queueSize), size: int64(queueSize), aggregate: make(chan struct{}, 1)}
	b.win.push = b.push
	b.workers.Store(1)
	b.SetBatching(batchSize, maxDelay)
	return b
}

// SetBatching changes the batch size and delay; the next batch uses them.
func (b *Batcher) SetBatching(batchSize int, maxDelay time.Duration) {
	b.batchSize.Store(int64(max(batchSize, 1)))
	b.maxDelay.Store(int64(maxDelay))
	b.win.setLimit(windowSize(int(b.batchSize.Load()), int(b.workers.Load())))
	b.win.setRows(int(b.batchSize.Load()))
}

// SetPreferred sets the preferred batch sizes (any order; those above the batch size are
// passed over); the next batch uses them.
func (b *Batcher) SetPreferred(sizes []int) {
	p := slices.Compact(slices.Sorted(slices.Values(sizes)))
	b.preferred.Store(&p)
}

// SetWhole makes a batch that goes at once (its delay passed, or none) while another batch
// runs take the queue in whole forwards of rows requests, leaving the rest queued for the
// next (0: off). Where the backend keeps a model compiled for that many rows (core.ShapePlanned),
// every forward then runs on it instead of the dynamic-shape one, which costs more an image
// and more again when each batch has another size (docs/benchmarks.md). The rest waits for
// the next free worker, at most the running batch's forward.
func (b *Batcher) SetWhole(rows int) { b.whole.Store(int64(max(rows, 0))) }

// target is the size a batch that may take up to size requests is formed to, as Triton's
// dynamic batcher forms one: with preferred sizes, the largest of them the queue holds
// (n requests, those taken included) goes at once, and a queue that holds more than all of
// them sends the largest; once the oldest request's delay has passed (exceeded; a delay of
// 0 never has), whatever is queued goes, up to size. waiting reports that n is below every
// preferred size: the target is the largest, and is looked at again as requests come.
func (b *Batcher) target(size, n int, exceeded bool) (target int, waiting bool) {
	pp := b.preferred.Load()
	if pp == nil || exceeded {
		return size, false
	}
	var best, top int
	for _, p := range *pp {
		if p > size {
			break
		}
		top = p
		if p <= n {
			best = p
		}
	}
	switch {
	case top == 0:
		return size, false
	case best > 0:
		return best, false
	}
	return top, true
}

// setWorkers sizes the window for n workers.
func (b *Batcher) setWorkers(n int) {
	b.workers.Store(int64(n))
	b.win.setLimit(windowSize(int(b.batchSize.Load()), n))
}

// reservation is a request's place in the queue, taken before its body is decoded and
// preprocessed: past capacity a request is refused for the price of its headers, instead of
// after a decode whose result would be thrown away. Then, with wait, it takes a place in the
// window before the body is decoded. Submit turns it into a queue entry; release gives it
// back on every other path. Both are idempotent.
type reservation struct {
	b      *Batcher
	win    *inputWindow // set while it holds a window place, and then by its job until it finishes
	place  uint64
	queued bool          // Submit handed it to the job
	waited time.Duration // for the window place
	// blocked: the window was full, and the request waited for its place.
	blocked bool
	left    atomic.Bool // its job gave the window place back
	// slab holds the row its request's input was preprocessed into (row); nil: none.
	slab *slab
}

// row lends the request its place's row of size bytes (handlers.Request.Row): nil where
// the place has none of that size. The release it returns is idempotent.
func (r *reservation) row(size int) ([]byte, func()) {
	if r.win == nil || r.slab != nil {
		return nil, nil
	}
	mem, s := r.win.row(r.place, size)
	if mem == nil {
		return nil, nil
	}
	r.slab = s
	win := r.win
	var given atomic.Bool
	return mem, func() {
		if given.CompareAndSwap(false, true) {
			win.giveRow(s)
		}
	}
}

// wait takes a place in b's window, in arrival order, waiting at most timeout (0: no
// limit); false means the timeout passed first.
func (r *reservation) wait(timeout time.Duration) bool {
	// A free place is taken without reading the clock twice: the usual case, at every request.
	if n, ok := r.b.win.tryEnter(); ok {
		r.win, r.place = &r.b.win, n
		return true
	}
	start := time.Now()
	n, ok, blocked := r.b.win.enter(timeout)
	r.waited, r.blocked = time.Since(start), blocked
	if ok {
		r.win, r.place = &r.b.win, n
	}
	return ok
}

// reserve takes a place if the queued and the admitted requests leave one.
func (b *Batcher) reserve() (*reservation, bool) {
	r := &reservation{}
	return r, b.reserveIn(r)
}

// reserveIn is reserve into r, which the caller allocated (with the rest of its request).
func (b *Batcher) reserveIn(r *reservation) bool {
	if b.held.Add(1) > b.size {
		b.held.Add(-1)
		return false
	}
	r.b = b
	return true
}

func (r *reservation) release() {
	if r == nil || r.b == nil {
		return
	}
	b := r.b
	r.b = nil
	if r.queued {
		return // the job holds both places now
	}
	b.held.Add(-1)
	if r.win != nil {
		r.win.resolve(r.place, nil)
		r.win.leave()
		r.win = nil
	}
}

// Submit queues j without blocking. A job whose reservation holds a window place enters the
// queue once every request admitted to the window before it has entered or given up. A job
// takes over its reservation's queue place; one without (tests) takes a place of its own.
func (b *Batcher) Submit(j *job) error {
	if b.closed.Load() {
		return ErrQueueFull
	}
	if r := j.rsv; r != nil && r.b == b {
		r.queued = true
		if r.win != nil {
			b.win.resolve(r.place, j)
			return nil
		}
	} else if b.held.Add(1) > b.size {
		b.held.Add(-1)
		return ErrQueueFull
	}
	if !b.enqueue(j) {
		return ErrQueueFull
	}
	return nil
}

// push moves a job of the window into the queue; it never blocks. A job that cannot be
// queued (the model is going, or its request already left) is answered outside the
// window's lock.
func (b *Batcher) push(j *job) {
	if b.closed.Load() {
		// The model is being unregistered: its queue was (or is being) answered, and no
		// worker will take this job.
		b.giveBack(j)
		go j.finish(Result{err: ErrQueueFull})
		return
	}
	if !b.enqueue(j) {
		go j.finish(Result{err: ErrQueueFull})
	}
}

// enqueue puts j, which holds a queue place, into the queue; false when it is not there: its
// place is given back.
func (b *Batcher) enqueue(j *job) bool {
	b.queued.Add(1)
	if !j.place.CompareAndSwap(placeReserved, placeQueued) {
		// Its request stopped waiting before it got here (abandon).
		b.queued.Add(-1)
		b.held.Add(-1)
		return false
	}
	select {
	case b.queue <- j:
		return true
	default:
		// Only abandoned jobs can fill the room beyond size; a worker drops them.
		b.took(j)
		return false
	}
}

// giveBack frees the queue place of a job that was never queued.
func (b *Batcher) giveBack(j *job) {
	if j.place.CompareAndSwap(placeReserved, placeFreed) || j.place.CompareAndSwap(placeAbandoned, placeFreed) {
		b.held.Add(-1)
	}
}

// took gives back the queue place of j, which left the queue (a worker took it, or the
// model's close answered it), unless its request already gave it back.
func (b *Batcher) took(j *job) {
	if j.place.CompareAndSwap(placeQueued, placeFreed) {
		b.held.Add(-1)
		b.queued.Add(-1)
	}
}

// abandon gives back the queue place of a job whose request stopped waiting (its deadline
// passed): the job stays in the queue until a worker drops it, out of the count. A job not
// yet queued is marked, and enqueue gives its place back.
func (b *Batcher) abandon(j *job) {
	if j.place.CompareAndSwap(placeReserved, placeAbandoned) {
		return
	}
	b.took(j)
}

// alone reports whether a batch being formed may go without its delay: dispatchAlone is
// set, and no other request of the model is admitted (being decoded), queued, or in a
// running batch. The batch's own requests are no longer held once taken.
func (b *Batcher) alone() bool {
	return b.dispatchAlone && b.held.Load() == 0 && b.running.Load() == 0
}

// done ends a batch that next dispatched: its worker has answered it.
func (b *Batcher) done() { b.running.Add(-1) }

// Pending returns the number of queued requests.
func (b *Batcher) Pending() int { return int(b.queued.Load()) }

// Capacity returns the queue's size.
func (b *Batcher) Capacity() int { return int(b.size) }

// Reserved returns the number of requests admitted and not yet queued.
func (b *Batcher) Reserved() int { return int(max(b.held.Load()-b.queued.Load(), 0)) }

// MeanBatchSize returns the mean number of requests per dispatched batch so far.
func (b *Batcher) MeanBatchSize() float64 {
	n := b.batches.Load()
	if n == 0 {
		return 0
	}
	return float64(b.batchItems.Load()) / float64(n)
}

// live drops j, answering it, if its deadline passed or its client left.
func live(j *job, now time.Time) bool {
	if !j.deadline.IsZero() && now.After(j.deadline) {
		j.finish(Result{err: ErrDeadline, Queued: j.queuedFor(now)})
		return false
	}
	if j.gone != nil && j.gone() {
		j.finish(Result{err: ErrClientGone, Queued: j.queuedFor(now)})
		return false
	}
	return true
}

// next forms the next batch. It blocks until a live request arrives or stop closes; it
// returns nil only when stop is closed and nothing was taken.
func (b *Batcher) next(stop <-chan struct{}) []*job { return b.nextOrIdle(stop, nil, nil) }

// nextOrIdle is next, except that it also returns nil, with nothing taken, when idle fires
// first (a nil idle never does). The batch reuses buf's array when it is large enough (a
// worker's previous batch, answered).
func (b *Batcher) nextOrIdle(stop <-chan struct{}, idle <-chan time.Time, buf []*job) []*job {
	select {
	case <-stop:
		return nil
	case <-idle:
		return nil
	case b.aggregate <- struct{}{}:
	}
	defer func() { <-b.aggregate }()
	var first *job
	for first == nil {
		select {
		case <-stop:
			return nil
		case <-idle:
			return nil
		case j := <-b.queue:
			b.took(j)
			if live(j, time.Now()) {
				first = j
			}
		}
	}
	size := int(b.batchSize.Load())
	if r := first.rsv; r != nil && r.slab != nil {
		// A batch of rows ends where their slab does, so that it runs where it lies (rows.go);
		// after a short batch (its delay passed), the next one ends there and the following
		// ones fill whole slabs again.
		size = min(size, int(r.slab.end-r.place))
	}
	batch := buf[:0]
	if cap(batch) < size {
		batch = make([]*job, 0, size)
	}
	batch = append(batch, first)
	delay := time.Duration(b.maxDelay.Load())
	deadline := first.enqueued.Add(delay)
	exceeded := delay > 0 && !time.Now().Before(deadline)
	target, waiting := b.target(size, 1+int(b.queued.Load()), exceeded)
	whole := false
	if w := int(b.whole.Load()); w > 0 && !waiting && (exceeded || delay == 0) && b.running.Load() > 0 {
		if n := 1 + int(b.queued.Load()); n >= w && n < target {
			target, whole = n/w*w, true
		}
	}
	add := func(j *job) {
		b.took(j)
		if live(j, time.Now()) {
			batch = append(batch, j)
		}
		if waiting {
			target, waiting = b.target(size, len(batch)+int(b.queued.Load()), false)
		}
	}
	var timer *time.Timer
	for len(batch) < target {
		// Take what is already queued without arming a timer.
		select {
		case j := <-b.queue:
			add(j)
			continue
		default:
		}
		if b.alone() {
			break
		}
		wait := time.Until(deadline)
		if wait <= 0 {
			if target < size && delay > 0 && !whole {
				// The delay passed while the batch waited for a preferred size: whatever
				// is queued goes.
				target, waiting = size, false
				continue
			}
			break
		}
		if timer == nil {
			timer = time.NewTimer(wait)
			defer timer.Stop()
		}
		select {
		case j := <-b.queue:
			add(j)
		case <-timer.C:
			// The delay has passed: the loop's top takes what is queued, then sends.
		}
	}
	b.running.Add(1)
	b.markMu.Lock()
	b.mark = dispatchMark{time.Now(), b.batches.Load(), b.batchItems.Load()}
	b.batches.Add(1)
	b.batchItems.Add(int64(len(batch)))
	b.markMu.Unlock()
	return batch
}
