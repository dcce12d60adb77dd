package core

import "sync"

// coreShare shares the machine's cores among the forwards running at each moment, across
// every model: a forward that starts takes the cores no running forward holds, or an even
// share of all of them, whichever is more. Alone, a forward gets every core; when several
// run, each that starts gets cores / running. A running forward keeps its count until it
// returns (OpenMP reads a thread's count when a parallel region starts, and no thread can
// change another's), so when forwards start while one holds every core the machine is
// briefly oversubscribed; the shares even out as those forwards return.
type coreShare struct {
	cores int

	mu      sync.Mutex
	running int // forwards in flight
	held    int // intra-op threads they hold
}

func newCoreShare(cores int) *coreShare { return &coreShare{cores: max(cores, 1)} }

// take returns the threads a forward starting now runs with and counts it as running.
// fixed > 0 is a count set by hand, taken as it is; otherwise limit > 0 caps the share (the
// tuner found that fewer threads serve more). Give the count back with put.
func (c *coreShare) take(fixed, limit int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.running++
	n := fixed
	if n <= 0 {
		n = max(c.cores-c.held, c.cores/c.running, 1)
		if limit > 0 {
			n = min(n, limit)
		}
	}
	c.held += n
	return n
}

// put ends a forward that take started with n threads.
func (c *coreShare) put(n int) {
	c.mu.Lock()
	c.running--
	c.held -= n
	c.mu.Unlock()
}
