package openvino

/*
#include <stdlib.h>
#include "ov.h"
*/
import "C"

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"unsafe"
)

// MaxElements bounds the elements a sample of one input or output may declare (its static
// dimensions after the batch), far above any real tensor: OpenVINO would otherwise allocate
// what a hostile IR declares when it compiles or first runs.
const MaxElements = 1 << 28

// TensorInfo describes one input or output of a model.
type TensorInfo struct {
	Name  string   // the port's tensor name ("" when the graph gives none)
	Type  ElemType // Dynamic when the graph leaves it open
	Shape []int64  // -1 for a dynamic dimension; nil when the rank is dynamic
}

// Options configure a compiled model. The zero value is OpenVINO's defaults on the CPU.
type Options struct {
	// Precision is INFERENCE_PRECISION_HINT: "f32", "bf16" or "f16"; "" = OpenVINO's
	// default (bf16 where the CPU has AMX, else f32). An int8 (NNCF) model runs its
	// quantized layers in int8 whatever this says.
	Precision string
	// Hint is PERFORMANCE_HINT: "LATENCY" or "THROUGHPUT"; "" = OpenVINO's default.
	Hint string
	// Streams is NUM_STREAMS (requests that run at once); 0 = the hint's choice.
	Streams int
	// Threads is INFERENCE_NUM_THREADS (threads of all the streams together); 0 = every core.
	Threads int
	// Unpinned sets ENABLE_CPU_PINNING to NO: the streams' threads move between the cores
	// as the kernel schedules them, where OpenVINO's default on Linux holds each to its own
	// core while it runs (a server's other threads then queue on a held core while another
	// idles).
	Unpinned bool
	// DynamicBatch makes the first dimension of every input dynamic before compiling, so
	// that one compiled model runs any batch size: 1 to MaxBatch where MaxBatch is set.
	DynamicBatch bool
	// MaxBatch bounds the dynamic batch (0: unbounded), so that OpenVINO plans the model's
	// memory for the largest batch it will run.
	MaxBatch int
	// Batch compiles the model for exactly this batch size (0: the IR's), its first dimension
	// static: OpenVINO then picks kernels and memory for that size, which a full batch runs
	// faster on than on a dynamic model (EfficientNet-Lite0 in bf16: docs/benchmarks.md).
	// Not with DynamicBatch.
	Batch int
}

var precisions = map[string]bool{"": true, "f32": true, "bf16": true, "f16": true}
var hints = map[string]bool{"": true, "LATENCY": true, "THROUGHPUT": true}

// Model is a model compiled for the CPU. Its methods are safe for concurrent use; its
// Requests each run one inference at a time.
type Model struct {
	path    string
	inputs  []TensorInfo
	outputs []TensorInfo

	mu       sync.Mutex
	ptr      *C.ov_compiled_model_t
	requests []*Request
}

// Compile reads the model at path (an OpenVINO IR .xml, whose weights are the .bin of the
// same name, or an .onnx file) and compiles it for the CPU with o. It calls Init("") if
// Init has not succeeded yet.
func Compile(path string, o Options) (*Model, error) {
	if err := Init(""); err != nil {
		return nil, err
	}
	if !precisions[o.Precision] {
		return nil, &Error{Op: "options", kind: ErrBadInput, Msg: fmt.Sprintf("precision %q is not one of f32, bf16, f16", o.Precision)}
	}
	if !hints[o.Hint] {
		return nil, &Error{Op: "options", kind: ErrBadInput, Msg: fmt.Sprintf("performance hint %q is not LATENCY or THROUGHPUT", o.Hint)}
	}
	if o.Streams < 0 || o.Threads < 0 {
		return nil, &Error{Op: "options", kind: ErrBadInput, Msg: "streams and threads must be 0 (the default) or more"}
	}
	if o.MaxBatch < 0 || o.Batch < 0 || o.Batch > 0 && o.DynamicBatch || o.MaxBatch > 0 && !o.DynamicBatch {
		return nil, &Error{Op: "options", kind: ErrBadInput, Msg: "a batch size is 0 (the default) or more; MaxBatch goes with DynamicBatch, Batch without it"}
	}
	if st, err := os.Stat(path); err != nil || !st.Mode().IsRegular() {
		return nil, &Error{Op: "load", kind: ErrBadModel, Msg: fmt.Sprintf("no model file at %s", path)}
	}
	var cleanup []unsafe.Pointer
	defer func() {
		for _, p := range cleanup {
			C.free(p)
		}
	}()
	cstr := func(s string) *C.char {
		p := C.CString(s)
		cleanup = append(cleanup, unsafe.Pointer(p))
		return p
	}
	var bin *C.char
	if strings.EqualFold(filepath.Ext(path), ".xml") {
		b := strings.TrimSuffix(path, filepath.Ext(path)) + ".bin"
		// OpenVINO reads an IR without weights as one without constants; say which file is missing.
		if st, err := os.Stat(b); err != nil || !st.Mode().IsRegular() {
			return nil, &Error{Op: "load", kind: ErrBadModel, Msg: fmt.Sprintf("%s has no weights file beside it (%s)", filepath.Base(path), filepath.Base(b))}
		}
		bin = cstr(b)
	}
	var m *C.ov_model_t
	if err := statusError("read "+filepath.Base(path), C.ovw_read_model(cstr(path), bin, &m), ErrBadModel); err != nil {
		return nil, err
	}
	defer C.ovw_model_free(m)
	switch {
	case o.DynamicBatch && o.MaxBatch > 0:
		if err := statusError("make the batch dynamic", C.ovw_model_batch(m, 1, C.int64_t(o.MaxBatch)), ErrBadModel); err != nil {
			return nil, err
		}
	case o.DynamicBatch:
		if err := statusError("make the batch dynamic", C.ovw_model_batch(m, -1, -1), ErrBadModel); err != nil {
			return nil, err
		}
	case o.Batch > 0:
		if err := statusError(fmt.Sprintf("make the batch %d", o.Batch), C.ovw_model_batch(m, C.int64_t(o.Batch), C.int64_t(o.Batch)), ErrBadModel); err != nil {
			return nil, err
		}
	}
	out := &Model{path: path}
	var err error
	if out.inputs, err = readIO(m, 0); err == nil {
		out.outputs, err = readIO(m, 1)
	}
	if err != nil {
		return nil, err
	}
	for _, t := range append(append([]TensorInfo{}, out.inputs...), out.outputs...) {
		if err := checkSize(t, o.DynamicBatch || o.Batch > 0); err != nil {
			return nil, err
		}
	}
	var copts C.ovw_options
	if o.Precision != "" {
		copts.precision = cstr(o.Precision)
	}
	if o.Hint != "" {
		copts.hint = cstr(o.Hint)
	}
	if o.Streams > 0 {
		copts.streams = cstr(strconv.Itoa(o.Streams))
	}
	if o.Threads > 0 {
		copts.threads = cstr(strconv.Itoa(o.Threads))
	}
	if o.Unpinned {
		copts.pinning = cstr("NO")
	}
	if err := statusError("compile "+filepath.Base(path), C.ovw_compile(m, &copts, &out.ptr), ErrBadModel); err != nil {
		return nil, err
	}
	return out, nil
}

// checkSize refuses a tensor whose static dimensions (after the batch, when batched) hold
// more than MaxElements, or whose dimensions are negative.
func checkSize(t TensorInfo, batched bool) error {
	n := int64(1)
	for i, d := range t.Shape {
		if d < -1 {
			return &Error{Op: "check", kind: ErrBadModel, Msg: fmt.Sprintf("tensor %q declares shape %v", t.Name, t.Shape)}
		}
		if d < 0 || i == 0 && batched {
			continue
		}
		if d > MaxElements || n*d > MaxElements {
			return &Error{Op: "check", kind: ErrBadModel, Msg: fmt.Sprintf(
				"tensor %q declares shape %v, more than %d elements a sample: refused before OpenVINO allocates it", t.Name, t.Shape, MaxElements)}
		}
		n *= d
	}
	return nil
}

// readIO reads the model's inputs (output 0) or outputs (1).
func readIO(m *C.ov_model_t, output C.int) ([]TensorInfo, error) {
	var n C.size_t
	if err := statusError("read the model's inputs and outputs", C.ovw_model_io_count(m, output, &n), ErrBadModel); err != nil {
		return nil, err
	}
	out := make([]TensorInfo, int(n))
	for i := range out {
		var info C.ovw_io
		e := C.ovw_model_io(m, output, C.size_t(i), &info)
		if err := statusError("read the model's inputs and outputs", e, ErrBadModel); err != nil {
			C.ovw_io_free(&info)
			return nil, err
		}
		t := TensorInfo{Name: C.GoString(info.name), Type: ElemType(info.elem)}
		if info.rank >= 0 {
			t.Shape = make([]int64, int(info.rank))
			if info.rank > 0 {
				copy(t.Shape, unsafe.Slice((*int64)(unsafe.Pointer(info.dims)), int(info.rank)))
			}
		}
		C.ovw_io_free(&info)
		out[i] = t
	}
	return out, nil
}

// Path is the model file the model was read from.
func (m *Model) Path() string { return m.path }

// Inputs describes the model's inputs, in the graph's order (the batch dynamic with
// DynamicBatch). The caller must not modify them.
func (m *Model) Inputs() []TensorInfo { return m.inputs }

// Outputs describes the model's outputs, in the graph's order. The caller must not modify them.
func (m *Model) Outputs() []TensorInfo { return m.outputs }

// Property is a property of the compiled model as OpenVINO settled it ("NUM_STREAMS",
// "INFERENCE_PRECISION_HINT", "INFERENCE_NUM_THREADS", "PERFORMANCE_HINT", ...).
func (m *Model) Property(key string) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ptr == nil {
		return "", ErrClosed
	}
	ck := C.CString(key)
	defer C.free(unsafe.Pointer(ck))
	var v *C.char
	if err := statusError("property "+key, C.ovw_compiled_property(m.ptr, ck, &v), ErrBadInput); err != nil {
		return "", err
	}
	defer C.free(unsafe.Pointer(v))
	return C.GoString(v), nil
}

// NewRequest makes an infer request: one per goroutine that runs the model at once (a worker).
func (m *Model) NewRequest() (*Request, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ptr == nil {
		return nil, ErrClosed
	}
	r := &Request{model: m}
	if err := statusError("make an infer request", C.ovw_request_new(m.ptr, &r.ptr), nil); err != nil {
		return nil, err
	}
	m.requests = append(m.requests, r)
	return r, nil
}

// Close releases the model and its requests, after the inferences in progress end. A second
// Close does nothing.
func (m *Model) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ptr == nil {
		return nil
	}
	for _, r := range m.requests {
		r.close()
	}
	m.requests = nil
	C.ovw_compiled_free(m.ptr)
	m.ptr = nil
	return nil
}
