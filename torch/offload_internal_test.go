package torch

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/torchd/torchd/internal/offload"
)

// loadSlow loads the zoo's slow model (models/slow.py): forward(x) takes x[i,0] ms per row,
// raises on a negative x[i,1], and returns x*2.
func loadSlow(t *testing.T) *Module {
	t.Helper()
	p := filepath.Join("..", "models", "out", "slow", "model.pt")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%v: run `make models` first", err)
	}
	m, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// slowForward runs m on one row of ms milliseconds and checks the answer is its own.
func slowForward(m *Module, ms float32, fail bool) error {
	flag := float32(0)
	if fail {
		flag = -1
	}
	x, err := NewTensor([]float32{ms, flag}, 1, 2)
	if err != nil {
		return err
	}
	out, err := m.Forward(x)
	if err != nil {
		return err
	}
	defer CloseValue(out)
	d, err := Data[float32](out.(*Tensor))
	if err != nil {
		return err
	}
	if d[0] != 2*ms || d[1] != 0 {
		return fmt.Errorf("forward of %v ms answered %v, want [%v 0]", ms, d, 2*ms)
	}
	return nil
}

// A worker's thread (one that set its own count) runs a long forward on its forward thread,
// with its count, and the answers and errors are those of a forward run in place. A thread
// that never set its count runs every forward itself.
func TestForwardThread(t *testing.T) {
	t.Cleanup(offload.SetAfter(0)) // every forward is long enough: the slow model's few ms vary by machine
	for _, threads := range []int{0, 1, 2} {
		t.Run(fmt.Sprintf("threads=%d", threads), func(t *testing.T) {
			m := loadSlow(t)
			var parked int64
			var ranWith int32
			var errs []error
			done := make(chan struct{})
			go func() {
				defer close(done)
				runtime.LockOSThread() // never unlocked: the thread ends with its forward thread
				if threads > 0 {
					SetNumThreadsHere(threads)
				}
				before := parkedForwards.Load()
				for i := range 3 {
					if err := slowForward(m, float32(2+i), false); err != nil {
						errs = append(errs, err)
					}
				}
				// Raised on the forward thread, it must come back as a plain error.
				if err := slowForward(m, 2, true); err == nil || !strings.Contains(err.Error(), "negative input") {
					errs = append(errs, fmt.Errorf("a failing forward returned %v, want the model's error", err))
				}
				parked = parkedForwards.Load() - before
				ranWith = parkedThreads.Load()
			}()
			<-done
			for _, err := range errs {
				t.Error(err)
			}
			want := int64(4) // the three forwards and the failing one
			if threads == 0 || !offload.Enabled {
				want = 0
			}
			if parked != want {
				t.Errorf("%d forwards ran on a forward thread, want %d", parked, want)
			}
			if want > 0 && ranWith != int32(threads) {
				t.Errorf("the forward thread ran with %d threads, want the worker's %d", ranWith, threads)
			}
		})
	}
}

// Workers on their own threads share one module: each parked forward answers its own input.
func TestForwardThreadsConcurrent(t *testing.T) {
	t.Cleanup(offload.SetAfter(0)) // every forward is long enough: the slow model's few ms vary by machine
	m := loadSlow(t)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			SetNumThreadsHere(1)
			for i := range 4 {
				if err := slowForward(m, float32(1+g)+float32(i)/8, false); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// A model's first forward on a worker thread is parked whatever the bound, so that a long
// model's worker starts no OpenMP pool on its own thread besides its forward thread's.
func TestFirstForwardParked(t *testing.T) {
	m := loadSlow(t)
	var parked int64
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		SetNumThreadsHere(1)
		before := parkedForwards.Load()
		err = slowForward(m, 0, false)
		parked = parkedForwards.Load() - before
	}()
	<-done
	if err != nil {
		t.Fatal(err)
	}
	if parked != 1 {
		t.Errorf("the first forward was not parked (%d parked)", parked)
	}
}
