package core

import (
	"testing"
	"time"
)

// admitted reserves a queue place and a window place on b, as admit does.
func admitted(t *testing.T, b *Batcher) *reservation {
	t.Helper()
	r, ok := b.reserve()
	if !ok {
		t.Fatal("queue full")
	}
	if !r.wait(0) {
		t.Fatal("no window place")
	}
	return r
}

// Jobs enter their batches in the order their requests took window places, whatever order
// their preprocessing ends in; a request that gives up its place holds nobody back.
func TestWindowKeepsArrivalOrder(t *testing.T) {
	b := NewBatcher(16, 8, 0)
	var rsv []*reservation
	var jobs []*job
	for range 6 {
		r := admitted(t, b)
		rsv = append(rsv, r)
		jobs = append(jobs, &job{rsv: r, enqueued: time.Now(), done: make(chan Result, 1)})
	}
	// Preprocessing ends last-first, and the third request fails before queueing.
	for _, i := range []int{5, 4, 3, 1} {
		if err := b.Submit(jobs[i]); err != nil {
			t.Fatal(err)
		}
		rsv[i].release()
	}
	if n := b.Pending(); n != 0 {
		t.Fatalf("%d jobs queued ahead of the first request's", n)
	}
	rsv[2].release()
	if err := b.Submit(jobs[0]); err != nil {
		t.Fatal(err)
	}
	rsv[0].release()
	batch := b.next(nil)
	want := []*job{jobs[0], jobs[1], jobs[3], jobs[4], jobs[5]}
	if len(batch) != len(want) {
		t.Fatalf("batch of %d, want %d", len(batch), len(want))
	}
	for i := range want {
		if batch[i] != want[i] {
			t.Fatalf("batch position %d holds another request than the %d-th admitted", i, i)
		}
	}
	if b.Reserved() != 0 {
		t.Fatalf("%d queue places still reserved", b.Reserved())
	}
	for _, j := range batch {
		j.finish(Result{})
	}
	if held, _, _, _ := b.win.stats(); held != 0 {
		t.Fatalf("%d window places held after every request finished", held)
	}
}

// Past its size the window makes requests wait, in arrival order, until a job finishes;
// a wait that outlives its timeout gives up without taking a place.
func TestWindowBoundsHeldInput(t *testing.T) {
	b := NewBatcher(64, 2, 0)
	size := windowSize(2, 1)
	var first *reservation
	for i := range size {
		r := admitted(t, b)
		if i == 0 {
			first = r
		}
	}
	late, ok := b.reserve()
	if !ok {
		t.Fatal("queue full")
	}
	if late.wait(time.Millisecond) {
		t.Fatalf("a request took a place in a full window of %d", size)
	}
	waiting := make(chan bool)
	go func() {
		r, _ := b.reserve()
		waiting <- r.wait(0)
	}()
	for {
		if _, _, waited, _ := b.win.stats(); waited == 2 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	j := &job{rsv: first, enqueued: time.Now(), done: make(chan Result, 1)}
	if err := b.Submit(j); err != nil {
		t.Fatal(err)
	}
	first.release()
	b.next(nil)[0].finish(Result{})
	if !<-waiting {
		t.Fatal("the waiting request got no place when a job finished")
	}
	if held, peak, _, _ := b.win.stats(); held != size || peak != size {
		t.Fatalf("%d places held (most %d), want the window's %d", held, peak, size)
	}
}

// A request that stops waiting for its job (a 504 while its batch is stuck in a forward)
// gives the place back at once; the job's answer later does not give it back twice.
func TestWindowPlaceGivenBackOnce(t *testing.T) {
	b := NewBatcher(16, 4, 0)
	r := admitted(t, b)
	other := admitted(t, b)
	j := &job{rsv: r, enqueued: time.Now(), done: make(chan Result, 1)}
	if err := b.Submit(j); err != nil {
		t.Fatal(err)
	}
	r.release()
	batch := b.next(nil)
	j.leaveWindow()
	if held, _, _, _ := b.win.stats(); held != 1 {
		t.Fatalf("%d places held after the request gave up, want 1 (the other request's)", held)
	}
	batch[0].finish(Result{})
	if held, _, _, _ := b.win.stats(); held != 1 {
		t.Fatalf("%d places held after the abandoned job finished, want still 1", held)
	}
	other.release()
	if held, _, _, _ := b.win.stats(); held != 0 {
		t.Fatalf("%d places held after every request ended", held)
	}
}
