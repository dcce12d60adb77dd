package torch

/*
#include "torchd.h"
*/
import "C"

import (
	"runtime"
	"sync/atomic"
	"time"

	"github.com/torchd/torchd/internal/offload"
)

// What the tests read: how many forwards ran on a forward thread, and the last one's count.
var (
	parkedForwards atomic.Int64
	parkedThreads  atomic.Int32
)

// forwardClock remembers how long a model's last forward took.
type forwardClock struct{ last atomic.Int64 }

// call runs a forward through run (in this cgo call) or start (parked), and returns its
// status and result. nodes are pinned with pin for a parked call: the forward thread reads
// them after start returns.
func (f *forwardClock) call(device string, pin *runtime.Pinner, nodes []C.td_node,
	run func(**C.td_result) C.td_error, start func(efd C.int) *C.td_call) (C.td_error, *C.td_result) {
	t0 := time.Now()
	defer func() { f.last.Store(int64(time.Since(t0))) }()
	var res *C.td_result
	// A CPU forward whose last run took offload.After or more runs on the worker thread's
	// forward thread while the goroutine waits parked; so does a model's first (a warm-up),
	// so that a long model's worker never starts an OpenMP pool on its own thread as well.
	if last := f.last.Load(); offload.Enabled && device == "cpu" && (last == 0 || last >= int64(offload.After)) {
		if w, err := offload.Get(); err == nil {
			if len(nodes) > 0 {
				pin.Pin(&nodes[0])
			}
			if c := start(C.int(w.FD())); c != nil {
				w.Wait()
				var ranWith C.int
				e := C.td_call_finish(c, &res, &ranWith)
				if ranWith > 0 {
					parkedForwards.Add(1)
					parkedThreads.Store(int32(ranWith))
				}
				return e, res
			}
			w.Put()
		}
	}
	return run(&res), res
}
