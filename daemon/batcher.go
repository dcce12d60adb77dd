package daemon

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/torchd/torchd/handlers"
)

// ErrQueueFull is returned by Batcher.Submit when the model's queue holds job_queue_size
// requests; the client gets 503 at once.
var ErrQueueFull = errors.New("queue full")

// errExpired and errClientGone answer jobs dropped before inference.
var (
	errExpired    = errors.New("request deadline passed while queued")
	errClientGone = errors.New("client disconnected while queued")
)

// job is one request waiting for inference.
type job struct {
	sample   *handlers.Sample
	enqueued time.Time
	deadline time.Time   // zero: none
	gone     func() bool // reports a disconnected client; nil: never
	done     chan jobResult
}

type jobResult struct {
	out       []handlers.Tensor
	err       error
	input     time.Duration // arrival → enqueue: decoding and preprocessing, set by runSample
	queued    time.Duration // enqueue → batch dispatch
	inference time.Duration // the batched forward
	batchSize int           // requests in the batch this one ran in
}

func (j *job) finish(r jobResult) { j.done <- r } // done has capacity 1: never blocks

// Batcher is a model version's bounded request queue and its batch formation. A batch takes
// up to batchSize requests and waits at most maxDelay, counted from the arrival of its oldest
// request; it goes the moment it is full.
type Batcher struct {
	queue chan *job
	// aggregate is held by the one worker forming a batch, so batches fill in arrival order
	// instead of being split across idle workers. It is a channel, not a mutex, because the
	// holder may wait on an empty queue indefinitely: a worker being stopped must be able to
	// give up waiting for it.
	aggregate chan struct{}
	batchSize atomic.Int64
	maxDelay  atomic.Int64 // time.Duration
	// closed is set when the model is unregistered; Submit then refuses.
	closed atomic.Bool
	// reserved counts requests admitted but not yet queued (being decoded and preprocessed).
	reserved atomic.Int64

	batches    atomic.Int64 // batches dispatched
	batchItems atomic.Int64 // requests dispatched in them
	busy       atomic.Int64 // nanoseconds the workers spent running batches (see WorkerPool.runBatch)

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
	b := &Batcher{queue: make(chan *job, queueSize), aggregate: make(chan struct{}, 1)}
	b.SetBatching(batchSize, maxDelay)
	return b
}

// SetBatching changes the batch size and delay; the next batch uses them.
func (b *Batcher) SetBatching(batchSize int, maxDelay time.Duration) {
	b.batchSize.Store(int64(max(batchSize, 1)))
	b.maxDelay.Store(int64(maxDelay))
}

// reservation is a request's place in the queue, taken before its body is decoded and
// preprocessed: past capacity a request is refused for the price of its headers, instead of
// after a decode whose result would be thrown away. Submit turns it into a queue entry;
// release gives it back on every other path. Both are idempotent.
type reservation struct{ b *Batcher }

// reserve takes a place if the queued and the admitted requests leave one.
func (b *Batcher) reserve() (*reservation, bool) {
	if b.reserved.Add(1)+int64(len(b.queue)) > int64(cap(b.queue)) {
		b.reserved.Add(-1)
		return nil, false
	}
	return &reservation{b}, true
}

func (r *reservation) release() {
	if r != nil && r.b != nil {
		r.b.reserved.Add(-1)
		r.b = nil
	}
}

// Submit queues j without blocking.
func (b *Batcher) Submit(j *job) error {
	if b.closed.Load() {
		return ErrQueueFull
	}
	select {
	case b.queue <- j:
		return nil
	default:
		return ErrQueueFull
	}
}

// Pending returns the number of queued requests.
func (b *Batcher) Pending() int { return len(b.queue) }

// Capacity returns the queue's size.
func (b *Batcher) Capacity() int { return cap(b.queue) }

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
		j.finish(jobResult{err: errExpired, queued: now.Sub(j.enqueued)})
		return false
	}
	if j.gone != nil && j.gone() {
		j.finish(jobResult{err: errClientGone, queued: now.Sub(j.enqueued)})
		return false
	}
	return true
}

// next forms the next batch. It blocks until a live request arrives or stop closes; it
// returns nil only when stop is closed and nothing was taken.
func (b *Batcher) next(stop <-chan struct{}) []*job {
	select {
	case <-stop:
		return nil
	case b.aggregate <- struct{}{}:
	}
	defer func() { <-b.aggregate }()
	var first *job
	for first == nil {
		select {
		case <-stop:
			return nil
		case j := <-b.queue:
			if live(j, time.Now()) {
				first = j
			}
		}
	}
	size := int(b.batchSize.Load())
	batch := make([]*job, 1, size)
	batch[0] = first
	deadline := first.enqueued.Add(time.Duration(b.maxDelay.Load()))
	var timer *time.Timer
	for len(batch) < size {
		// Take what is already queued without arming a timer.
		select {
		case j := <-b.queue:
			if live(j, time.Now()) {
				batch = append(batch, j)
			}
			continue
		default:
		}
		wait := time.Until(deadline)
		if wait <= 0 {
			break
		}
		if timer == nil {
			timer = time.NewTimer(wait)
			defer timer.Stop()
		}
		select {
		case j := <-b.queue:
			if live(j, time.Now()) {
				batch = append(batch, j)
			}
		case <-timer.C:
			wait = 0
		}
		if wait == 0 {
			break
		}
	}
	b.markMu.Lock()
	b.mark = dispatchMark{time.Now(), b.batches.Load(), b.batchItems.Load()}
	b.batches.Add(1)
	b.batchItems.Add(int64(len(batch)))
	b.markMu.Unlock()
	return batch
}
