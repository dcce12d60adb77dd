package torchserve

import (
	"testing"

	"github.com/torchd/torchd/handlers"
)

// A client that takes no parts holds at most maxQueuedParts of them: past it the queue drops
// them all, says so to its taker, and cuts the transfer once.
func TestPartQueueBounded(t *testing.T) {
	q := newPartQueue()
	cuts := 0
	q.onOverflow(func() { cuts++ })
	part := handlers.Response{Body: make([]byte, 1<<20)}
	for range 2000 {
		q.push(part)
		if q.bytes > maxQueuedParts {
			t.Fatalf("%d bytes queued", q.bytes)
		}
	}
	parts, over := q.take()
	if !over || len(parts) != 0 || cuts != 1 {
		t.Fatalf("after 2000 MiB pushed: %d parts, overflow %v, %d cuts", len(parts), over, cuts)
	}
	// A queue that overflowed before its taker set the cut cuts at once.
	late := 0
	q.onOverflow(func() { late++ })
	if late != 1 {
		t.Errorf("a late cut was called %d times", late)
	}
	// Under the bound, the parts come in order.
	q = newPartQueue()
	for i := range 3 {
		q.push(handlers.Response{Body: []byte{byte(i)}})
	}
	if parts, over := q.take(); over || len(parts) != 3 || parts[2].Body[0] != 2 {
		t.Errorf("%v, overflow %v", parts, over)
	}
}
