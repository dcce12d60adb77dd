package onnxrt

/*
#include <stdlib.h>
#include "ort.h"
#include "offload.h"

// A run handed to the session's own thread (Session.run).
typedef struct {
  OrtSession *s;
  OrtRunOptions *ro;
  const char *const *in_names;
  const ort_input *ins;
  size_t nin;
  const char *const *out_names;
  size_t nout;
  OrtValue **outs;
  ort_error *err;
} ort_call;

static void ort_call_run(void *arg) {
  ort_call *c = (ort_call *)arg;
  c->err = ort_run(c->s, c->ro, c->in_names, c->ins, c->nin, c->out_names, c->nout, c->outs);
}

static void ort_submit(td_offload *o, ort_call *c, int efd) { td_offload_submit(o, ort_call_run, c, efd); }
*/
import "C"

import (
	"context"
	"fmt"
	"runtime"
	"time"
	"unsafe"

	"github.com/torchd/torchd/internal/nativelib"
	"github.com/torchd/torchd/internal/offload"
)

// Value is a tensor: Data holds its elements little-endian in row-major order, or, for
// String, Strings holds them (any bytes, NUL included).
type Value struct {
	Type    ElemType
	Shape   []int64
	Data    []byte
	Strings [][]byte
}

func badInput(format string, args ...any) error {
	return &Error{Op: "run", kind: ErrBadInput, Msg: fmt.Sprintf(format, args...)}
}

// check reports what is wrong with v as the model's input t, or nil.
func check(t TensorInfo, v Value) error {
	if t.Type == Undefined {
		return badInput("input %q is not a tensor; this binding runs tensors only", t.Name)
	}
	if v.Type != t.Type {
		return badInput("input %q is %s, not %s", t.Name, t.Type.TensorType(), v.Type.TensorType())
	}
	n, err := nativelib.CheckShape(t.Name, v.Shape, t.Shape)
	if err != nil {
		return badInput("%v", err)
	}
	if v.Type == String {
		if int64(len(v.Strings)) != n {
			return badInput("input %q has shape %v, %d strings, but %d given", t.Name, v.Shape, n, len(v.Strings))
		}
		return nil
	}
	size := v.Type.Size()
	if size == 0 {
		return badInput("input %q: %s tensors are not supported", t.Name, v.Type)
	}
	if err := nativelib.CheckBytes(t.Name, v.Shape, v.Type.String(), n, size, len(v.Data)); err != nil {
		return badInput("%v", err)
	}
	return nil
}

// Run runs the model on inputs (named by inputNames, one each; every model input once) and
// returns the outputs named by outputNames, all of them in the graph's order if it is empty.
// Inputs are read in place and must not change during the call; outputs are the caller's.
func (s *Session) Run(inputNames []string, inputs []Value, outputNames []string) ([]Value, error) {
	return s.RunContext(context.Background(), inputNames, inputs, outputNames)
}

// RunContext is Run that ends when ctx does: ONNX Runtime stops at its next operator (or loop
// iteration), and the error wraps ctx's (context.DeadlineExceeded, context.Canceled). A
// context that can never end costs nothing over Run.
func (s *Session) RunContext(ctx context.Context, inputNames []string, inputs []Value, outputNames []string) ([]Value, error) {
	if err := ctx.Err(); err != nil {
		return nil, &Error{Op: "run", Msg: "not started: " + err.Error(), kind: err}
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.ptr == nil {
		return nil, ErrClosed
	}
	if len(inputNames) != len(inputs) {
		return nil, badInput("%d input names for %d inputs", len(inputNames), len(inputs))
	}
	if len(inputs) != len(s.inputs) {
		return nil, badInput("%d inputs given; the model takes %d (%s)", len(inputs), len(s.inputs), names(s.inputs))
	}
	seen := make([]bool, len(s.inputs))
	cin := make([]C.ort_input, len(inputs))
	cinNames := make([]*C.char, len(inputs))
	var pin runtime.Pinner
	defer pin.Unpin()
	for i, name := range inputNames {
		k, ok := s.inIdx[name]
		if !ok {
			return nil, badInput("the model has no input %q; its inputs are %s", name, names(s.inputs))
		}
		if seen[k] {
			return nil, badInput("input %q is given twice", name)
		}
		seen[k] = true
		v := inputs[i]
		if err := check(s.inputs[k], v); err != nil {
			return nil, err
		}
		cinNames[i] = s.inNames[k]
		in := &cin[i]
		in.elem = C.int(v.Type)
		in.ndims = C.size_t(len(v.Shape))
		if len(v.Shape) > 0 {
			pin.Pin(&v.Shape[0])
			in.shape = (*C.int64_t)(unsafe.Pointer(&v.Shape[0]))
		}
		if v.Type == String {
			if len(v.Strings) > 0 {
				// The pointers to each string live in Go memory, pinned with their strings.
				ptrs := make([]*C.char, len(v.Strings))
				lens := make([]C.size_t, len(v.Strings))
				for j, b := range v.Strings {
					if len(b) > 0 {
						pin.Pin(&b[0])
						ptrs[j] = (*C.char)(unsafe.Pointer(&b[0]))
					}
					lens[j] = C.size_t(len(b))
				}
				pin.Pin(&ptrs[0])
				pin.Pin(&lens[0])
				in.strs = &ptrs[0]
				in.str_lens = &lens[0]
				in.nstrs = C.size_t(len(v.Strings))
			}
		} else if len(v.Data) > 0 {
			pin.Pin(&v.Data[0])
			in.data = unsafe.Pointer(&v.Data[0])
			in.nbytes = C.size_t(len(v.Data))
		}
	}
	outIdx := make([]int, 0, len(s.outputs))
	if len(outputNames) == 0 {
		for k := range s.outputs {
			outIdx = append(outIdx, k)
		}
	}
	for _, name := range outputNames {
		k, ok := s.outIdx[name]
		if !ok {
			return nil, badInput("the model has no output %q; its outputs are %s", name, names(s.outputs))
		}
		outIdx = append(outIdx, k)
	}
	coutNames := make([]*C.char, len(outIdx))
	for i, k := range outIdx {
		coutNames[i] = s.outNames[k]
	}
	couts := make([]*C.OrtValue, len(outIdx))
	var pIn *C.ort_input
	var pInNames, pOutNames **C.char
	var pOuts **C.OrtValue
	if len(cin) > 0 {
		pIn, pInNames = &cin[0], &cinNames[0]
	}
	if len(couts) > 0 {
		pOutNames, pOuts = &coutNames[0], &couts[0]
	}
	var ro *C.OrtRunOptions
	if ctx.Done() != nil {
		if err := statusError("run", C.ort_run_options_new(&ro), nil); err != nil {
			return nil, err
		}
		// The terminate never runs after stop, so ro is freed only once no one can use it.
		stop := nativelib.CancelOn(ctx, func() { C.ort_run_options_terminate(ro) })
		defer func() {
			stop()
			C.ort_run_options_free(ro)
		}()
	}
	e := s.run(ro, pInNames, pIn, len(cin), pOutNames, pOuts, len(couts), &pin)
	if err := statusError("run", e, ErrBadInput); err != nil {
		if cerr := ctx.Err(); cerr != nil {
			// Stopped by ctx (or failed as it ended): the caller's deadline is the cause to report.
			return nil, &Error{Op: "run", Code: err.(*Error).Code, Msg: "stopped: " + cerr.Error(), kind: cerr}
		}
		return nil, err
	}
	out := make([]Value, len(couts))
	var err error
	for i, v := range couts {
		if err == nil {
			out[i], err = readValue(v)
			if e, ok := err.(*Error); ok {
				e.Msg = fmt.Sprintf("output %q %s", s.outputs[outIdx[i]].Name, e.Msg)
			}
		}
		C.ort_value_free(v)
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// run runs the session: on its own thread while the goroutine waits parked when its last
// run took offload.After or more, else in this cgo call. A run that finds the thread busy
// (several goroutines on one session) runs in place.
func (s *Session) run(ro *C.OrtRunOptions, inNames **C.char, ins *C.ort_input, nin int,
	outNames **C.char, outs **C.OrtValue, nout int, pin *runtime.Pinner) *C.ort_error {
	t0 := time.Now()
	defer func() { s.last.Store(int64(time.Since(t0))) }()
	if offload.Enabled && s.last.Load() >= int64(offload.After) {
		if w, err := offload.Get(); err == nil {
			// What C reads after the submit returns: the call, and the arrays it points to.
			for _, p := range []unsafe.Pointer{unsafe.Pointer(inNames), unsafe.Pointer(ins),
				unsafe.Pointer(outNames), unsafe.Pointer(outs)} {
				if p != nil {
					pin.Pin(p)
				}
			}
			c := &C.ort_call{s: s.ptr, ro: ro, in_names: inNames, ins: ins, nin: C.size_t(nin),
				out_names: outNames, nout: C.size_t(nout), outs: outs}
			pin.Pin(c)
			C.ort_submit(s.thread(), c, C.int(w.FD()))
			w.Wait()
			return c.err
		}
	}
	return C.ort_run(s.ptr, ro, inNames, ins, C.size_t(nin), outNames, C.size_t(nout), outs)
}

// readValue copies a tensor's type, shape and elements into Go memory.
func readValue(v *C.OrtValue) (Value, error) {
	var elem C.int
	var ndims, count C.size_t
	var dims [8]C.int64_t
	if err := statusError("run", C.ort_value_shape(v, &elem, &ndims, &dims[0], C.size_t(len(dims)), &count), nil); err != nil {
		return Value{}, err
	}
	shape := make([]int64, int(ndims))
	if int(ndims) <= len(dims) {
		for i := range shape {
			shape[i] = int64(dims[i])
		}
	} else {
		big := make([]C.int64_t, int(ndims))
		if err := statusError("run", C.ort_value_shape(v, &elem, &ndims, &big[0], C.size_t(len(big)), &count), nil); err != nil {
			return Value{}, err
		}
		for i := range shape {
			shape[i] = int64(big[i])
		}
	}
	out := Value{Type: ElemType(elem), Shape: shape}
	n := int(count)
	if out.Type == String {
		out.Strings = make([][]byte, n)
		if n == 0 {
			return out, nil
		}
		offsets := make([]C.size_t, n)
		var buf *C.char
		var total C.size_t
		if err := statusError("run", C.ort_value_strings(v, count, &buf, &total, &offsets[0]), nil); err != nil {
			return Value{}, err
		}
		all := C.GoBytes(unsafe.Pointer(buf), C.int(total))
		C.free(unsafe.Pointer(buf))
		for i := range out.Strings {
			end := len(all)
			if i+1 < n {
				end = int(offsets[i+1])
			}
			out.Strings[i] = all[int(offsets[i]):end:end]
		}
		return out, nil
	}
	size := out.Type.Size()
	if size == 0 {
		return Value{}, &Error{Op: "run", Msg: fmt.Sprintf("is of type %s, which this binding does not read", out.Type)}
	}
	out.Data = make([]byte, n*size)
	if n > 0 {
		var p unsafe.Pointer
		if err := statusError("run", C.ort_value_data(v, &p), nil); err != nil {
			return Value{}, err
		}
		copy(out.Data, unsafe.Slice((*byte)(p), n*size))
	}
	return out, nil
}
