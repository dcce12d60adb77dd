package openvino

/*
#include <stdlib.h>
#include "ov.h"
#include "offload.h"

// An inference handed to the request's own thread (Request.infer).
typedef struct {
  ov_infer_request_t *r;
  const ovw_input *ins;
  size_t nin;
  ovw_error *err;
} ovw_call;

static void ovw_call_run(void *arg) {
  ovw_call *c = (ovw_call *)arg;
  c->err = ovw_infer(c->r, c->ins, c->nin);
}

static void ovw_submit(td_offload *o, ovw_call *c, int efd) { td_offload_submit(o, ovw_call_run, c, efd); }
*/
import "C"

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"time"
	"unsafe"

	"github.com/torchd/torchd/internal/nativelib"
	"github.com/torchd/torchd/internal/offload"
)

// Value is a tensor: Data holds its elements little-endian in row-major order.
type Value struct {
	Type  ElemType
	Shape []int64
	Data  []byte
}

// Request is one infer request of a Model: it runs one inference at a time (a second Infer
// waits), with buffers of its own that OpenVINO reuses from one inference to the next.
type Request struct {
	model *Model
	mu    sync.Mutex // held by Infer and close: never freed under a running inference
	ptr   *C.ov_infer_request_t
	// thread runs the request's long inferences while Infer waits parked (internal/offload);
	// started at the first, ended by close. last is the last inference's time.
	thread *C.td_offload
	last   time.Duration
}

func badInput(format string, args ...any) error {
	return &Error{Op: "infer", kind: ErrBadInput, Msg: fmt.Sprintf(format, args...)}
}

// check reports what is wrong with v as input t, or nil.
func check(t TensorInfo, v Value) error {
	if t.Type != Dynamic && v.Type != t.Type {
		return badInput("input %q is %s, not %s", t.Name, t.Type, v.Type)
	}
	size := v.Type.Size()
	if size == 0 {
		return badInput("input %q: %s tensors are not supported", t.Name, v.Type)
	}
	n, err := nativelib.CheckShape(t.Name, v.Shape, t.Shape)
	if err != nil {
		return badInput("%v", err)
	}
	if err := nativelib.CheckBytes(t.Name, v.Shape, v.Type.String(), n, size, len(v.Data)); err != nil {
		return badInput("%v", err)
	}
	return nil
}

// Infer runs the model on inputs, one for each of its inputs in the graph's order, and
// returns every output in the graph's order. Inputs are read in place and must not change
// during the call; outputs are the caller's.
func (r *Request) Infer(inputs []Value) ([]Value, error) {
	return r.InferContext(context.Background(), inputs)
}

// InferContext is Infer that ends when ctx does: OpenVINO cancels the inference, and the
// error wraps ctx's (context.DeadlineExceeded, context.Canceled).
func (r *Request) InferContext(ctx context.Context, inputs []Value) ([]Value, error) {
	if err := ctx.Err(); err != nil {
		return nil, &Error{Op: "infer", Msg: "not started: " + err.Error(), kind: err}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ptr == nil {
		return nil, ErrClosed
	}
	ins := r.model.inputs
	if len(inputs) != len(ins) {
		return nil, badInput("%d inputs given; the model takes %d", len(inputs), len(ins))
	}
	cin := make([]C.ovw_input, len(inputs))
	var pin runtime.Pinner
	defer pin.Unpin()
	for i, v := range inputs {
		if err := check(ins[i], v); err != nil {
			return nil, err
		}
		cin[i].elem = C.int(v.Type)
		cin[i].ndims = C.size_t(len(v.Shape))
		if len(v.Shape) > 0 {
			pin.Pin(&v.Shape[0])
			cin[i].shape = (*C.int64_t)(unsafe.Pointer(&v.Shape[0]))
		}
		if len(v.Data) > 0 {
			pin.Pin(&v.Data[0])
			cin[i].data = unsafe.Pointer(&v.Data[0])
		}
	}
	var pIn *C.ovw_input
	if len(cin) > 0 {
		pIn = &cin[0]
	}
	if ctx.Done() != nil {
		defer nativelib.CancelOn(ctx, func() { C.ovw_cancel(r.ptr) })()
	}
	// OpenVINO finds shapes the graph cannot take (a spatial size its layers do not divide)
	// only when it runs: those are the caller's too.
	if err := statusError("infer", r.infer(pIn, len(cin), &pin), ErrBadInput); err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return nil, &Error{Op: "infer", Code: err.(*Error).Code, Msg: "stopped: " + cerr.Error(), kind: cerr}
		}
		return nil, err
	}
	out := make([]Value, len(r.model.outputs))
	for i := range out {
		var elem C.int
		var ndims, nbytes C.size_t
		var dims [8]C.int64_t
		var data unsafe.Pointer
		e := C.ovw_output(r.ptr, C.size_t(i), &elem, &ndims, &dims[0], C.size_t(len(dims)), &data, &nbytes)
		if err := statusError(fmt.Sprintf("read output %q", r.model.outputs[i].Name), e, nil); err != nil {
			return nil, err
		}
		if int(ndims) > len(dims) {
			return nil, &Error{Op: "infer", Msg: fmt.Sprintf("output %q has %d dimensions; this binding reads at most %d", r.model.outputs[i].Name, ndims, len(dims))}
		}
		v := Value{Type: ElemType(elem), Shape: make([]int64, int(ndims))}
		for d := range v.Shape {
			v.Shape[d] = int64(dims[d])
		}
		if v.Type.Size() == 0 {
			return nil, &Error{Op: "infer", Msg: fmt.Sprintf("output %q is of type %s, which this binding does not read", r.model.outputs[i].Name, v.Type)}
		}
		v.Data = make([]byte, int(nbytes))
		if nbytes > 0 {
			copy(v.Data, unsafe.Slice((*byte)(data), int(nbytes)))
		}
		out[i] = v
	}
	return out, nil
}

// infer runs the request on its inputs: on the request's thread while the goroutine waits
// parked when its last inference took offload.After or more, else in this cgo call.
func (r *Request) infer(ins *C.ovw_input, n int, pin *runtime.Pinner) *C.ovw_error {
	t0 := time.Now()
	defer func() { r.last = time.Since(t0) }()
	if offload.Enabled && r.last >= offload.After {
		if r.thread == nil {
			r.thread = C.td_offload_new() // NULL if it cannot start: the call then runs here
		}
		if w, err := offload.Get(); err == nil {
			c := &C.ovw_call{r: r.ptr, ins: ins, nin: C.size_t(n)}
			pin.Pin(c)
			if ins != nil {
				pin.Pin(ins)
			}
			C.ovw_submit(r.thread, c, C.int(w.FD()))
			w.Wait()
			return c.err
		}
	}
	return C.ovw_infer(r.ptr, ins, C.size_t(n))
}

// Close releases the request, after its inference in progress ends. A second Close does
// nothing; the model's Close closes the requests left.
func (r *Request) Close() error {
	m := r.model
	m.mu.Lock()
	for i, q := range m.requests {
		if q == r {
			m.requests = append(m.requests[:i], m.requests[i+1:]...)
			break
		}
	}
	m.mu.Unlock()
	r.close()
	return nil
}

func (r *Request) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.thread != nil {
		C.td_offload_free(unsafe.Pointer(r.thread))
		r.thread = nil
	}
	if r.ptr != nil {
		C.ovw_request_free(r.ptr)
		r.ptr = nil
	}
}
