package offload

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Wait returns once the other side writes, not before, and the Waker is then reused.
func TestWaitParksUntilWritten(t *testing.T) {
	w, err := Get()
	if err != nil {
		t.Fatal(err)
	}
	written := make(chan struct{})
	go func() {
		time.Sleep(20 * time.Millisecond)
		close(written)
		one := []byte{1, 0, 0, 0, 0, 0, 0, 0}
		if _, err := unix.Write(w.FD(), one); err != nil {
			t.Error(err)
		}
	}()
	w.Wait()
	select {
	case <-written:
	default:
		t.Fatal("Wait returned before the write")
	}
	w2, err := Get()
	if err != nil {
		t.Fatal(err)
	}
	if w2 != w {
		t.Error("a waited Waker was not reused")
	}
	w2.Put()
}
