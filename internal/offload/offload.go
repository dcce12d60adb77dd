// Package offload lets a goroutine wait for a long C call parked instead of inside cgo.
//
// A goroutine in a cgo call holds its P in _Psyscall. While another P is idle the runtime's
// sysmon does not take that P back for 10 ms, and polls it meanwhile, from every 20 µs
// upwards (golang/go#18236, open). On a two-core machine each of those wakeups takes a core
// from the forward's own threads: a 20 ms ResNet-18 forward ran 5–10% slower than the same
// forward from Python (docs/design/engine.md). So a long call runs on a thread of the C
// library's own (offload.h), which writes an eventfd when it is done, and the goroutine
// reads the eventfd through the netpoller: its P is idle, and sysmon sleeps.
package offload

import (
	"os"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// After is how long a model's last call must have taken for its next to run parked. The
// wait costs two thread wakeups, about 50 µs: on a two-core Xeon with AMX, an OpenVINO
// ResNet-18 inference of 1.7 ms ran 3% slower parked, LibTorch's of 6 ms the same, and those
// of 18–33 ms 3–9% faster (docs/design/engine.md).
var After = 5 * time.Millisecond

// SetAfter sets After and returns what restores it: tests park every call with
// t.Cleanup(offload.SetAfter(0)).
func SetAfter(d time.Duration) (restore func()) {
	old := After
	After = d
	return func() { After = old }
}

// Enabled is false under TORCHD_FORWARD_THREAD=0, which keeps every call in cgo: the A/B
// switch of docs/design/engine.md's measurements.
var Enabled = os.Getenv("TORCHD_FORWARD_THREAD") != "0"

// A Waker is an eventfd the C side writes once per call, and the file the goroutine parks
// on. Wakers are reused: each call reads exactly the one write of its own.
type Waker struct {
	fd int // kept apart: os.File.Fd would switch the file to blocking mode
	f  *os.File
}

// FD is the descriptor to hand to C.
func (w *Waker) FD() int { return w.fd }

var (
	free  = make(chan *Waker, 64)
	waits atomic.Int64
)

// Waits returns how many calls have waited parked, for tests and diagnostics.
func Waits() int64 { return waits.Load() }

// Get returns a free Waker, making one if none is free.
func Get() (*Waker, error) {
	select {
	case w := <-free:
		return w, nil
	default:
	}
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return nil, err
	}
	// A non-blocking descriptor becomes a pollable file: Read parks the goroutine.
	return &Waker{fd: fd, f: os.NewFile(uintptr(fd), "offload")}, nil
}

// Wait parks the goroutine until the C side has written w once, then frees w. If the read
// fails, w is dropped without closing it: the C side may still write it, and a closed
// descriptor's number can be reused by another file.
func (w *Waker) Wait() {
	waits.Add(1)
	var b [8]byte
	if _, err := w.f.Read(b[:]); err != nil {
		return
	}
	w.Put()
}

// Put frees a Waker that was not handed to C after all.
func (w *Waker) Put() {
	select {
	case free <- w:
	default:
		w.f.Close()
	}
}
