package core

import (
	"sync"
	"sync/atomic"
	"time"
)

// inputWindow bounds the requests of a model version that hold their input decoded: a request
// takes a place in it before its body is decoded and preprocessed, and gives it back when
// its batch has run. Places go in arrival order; the requests past the window wait with
// their raw bodies, which are a fraction of a preprocessed tensor's size (a 40 KB JPEG
// against 602 KB for resnet18's 224² float input), so a burst costs the server its bodies
// and not its tensors.
//
// The window also keeps arrival order into batches: it numbers its places as it gives them,
// and a request's job enters the queue only after every job numbered before it entered or
// was given up, so one that preprocesses faster than an earlier one does not overtake it.
type inputWindow struct {
	// push puts a job in the queue; it is called with mu held and must not block.
	push func(*job)

	mu      sync.Mutex
	limit   int
	held    int
	peak    int             // the most places held at once (tests)
	waiting []chan uint64   // FIFO; each gets its place's number when given one
	next    uint64          // the number of the next place given
	head    uint64          // the number whose job enters the queue next
	parked  map[uint64]*job // jobs done preprocessing ahead of head; nil: place given up
	waited  int             // requests that have waited for a place (tests)

	// Rows (rows.go): the slabs that places begun from now on get rows, the current one, the
	// ones with places unresolved, and their pooled memory.
	rows     int
	slab     *slab
	slabs    []*slab
	mems     slabMemory
	recycled atomic.Int64 // slabs whose memory went back to the pool (tests)
}

// windowSize is the places a model version's window has: the batches its workers run plus
// the one forming, so that preprocessing keeps up with forwards, and at least two per core,
// so that small batches still decode on every core.
func windowSize(batchSize, workers int) int {
	return max(batchSize*(workers+1), 2*cores())
}

func (w *inputWindow) setLimit(n int) {
	w.mu.Lock()
	w.limit = max(n, 1)
	w.grant()
	w.mu.Unlock()
}

// enter takes a place, waiting in arrival order while the window is full, at most timeout
// (0: no limit). It returns the place's number, or false when timeout passed first; blocked
// says it had to wait.
func (w *inputWindow) enter(timeout time.Duration) (place uint64, ok, blocked bool) {
	w.mu.Lock()
	if w.held < w.limit && len(w.waiting) == 0 {
		n := w.take()
		w.mu.Unlock()
		return n, true, false
	}
	ch := make(chan uint64, 1)
	w.waiting = append(w.waiting, ch)
	w.waited++
	w.mu.Unlock()
	var expired <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		expired = t.C
	}
	select {
	case n := <-ch:
		return n, true, true
	case <-expired:
	}
	w.mu.Lock()
	for i, c := range w.waiting {
		if c == ch {
			w.waiting = append(w.waiting[:i], w.waiting[i+1:]...)
			w.mu.Unlock()
			return 0, false, true
		}
	}
	w.mu.Unlock()
	// The place came as the timer fired: give it back.
	w.resolve(<-ch, nil)
	w.leave()
	return 0, false, true
}

// tryEnter takes a place if one is free and no request waits for one, without waiting.
func (w *inputWindow) tryEnter() (place uint64, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.held < w.limit && len(w.waiting) == 0 {
		return w.take(), true
	}
	return 0, false
}

// take gives the next place; w.mu is held.
func (w *inputWindow) take() uint64 {
	w.held++
	w.peak = max(w.peak, w.held)
	n := w.next
	w.next++
	w.placeSlab(n)
	return n
}

// grant gives free places to the waiting requests in order; w.mu is held.
func (w *inputWindow) grant() {
	for w.held < w.limit && len(w.waiting) > 0 {
		ch := w.waiting[0]
		w.waiting = w.waiting[1:]
		ch <- w.take()
	}
}

// leave gives a place back.
func (w *inputWindow) leave() {
	w.mu.Lock()
	w.held--
	w.grant()
	w.mu.Unlock()
}

// resolve records what became of place n: its job j, ready for the queue, or nil when the
// request ended before queueing. Jobs go to push in their places' order, each as soon as
// all before it were resolved.
func (w *inputWindow) resolve(n uint64, j *job) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if n == w.head && len(w.parked) == 0 {
		// The usual case: the request is next in order, and none after it is parked.
		w.head++
		if j != nil {
			w.push(j)
		}
		w.resolveSlabs()
		return
	}
	if w.parked == nil {
		w.parked = map[uint64]*job{}
	}
	w.parked[n] = j
	for {
		next, ok := w.parked[w.head]
		if !ok {
			w.resolveSlabs()
			return
		}
		delete(w.parked, w.head)
		w.head++
		if next != nil {
			w.push(next)
		}
	}
}

// stats returns the places held, the most held at once, the requests that waited, and the
// window's size.
func (w *inputWindow) stats() (held, peak, waited, size int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.held, w.peak, w.waited, w.limit
}
