package onnxrt

/*
#include <stdlib.h>
#include "ort.h"
#include "offload.h"
*/
import "C"

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"
)

// TensorInfo describes one input or output of a model.
type TensorInfo struct {
	Name     string
	Type     ElemType // Undefined for an input or output that is not a tensor (a sequence, map)
	Shape    []int64  // -1 for a dynamic dimension; nil when the graph declares none (any rank), empty for a scalar
	DimNames []string // the graph's names of dynamic dimensions ("batch"), "" where none
}

// Options configure a session. The zero value is ONNX Runtime's defaults.
type Options struct {
	IntraOpThreads int // threads of one operator; 0 = ONNX Runtime's default (one per core)
	InterOpThreads int // threads across operators, with Parallel; 0 = default
	// GraphOptimization is "", "disable", "basic", "extended", "layout" or "all" ("" = all,
	// ONNX Runtime's default). Triton's onnxruntime backend reads optimization.graph.level -1
	// as basic, 1 as extended, 2 as disable and anything else as all.
	GraphOptimization string
	// Spinning sets session.intra_op.allow_spinning and session.inter_op.allow_spinning:
	// whether idle pool threads spin for work (lower latency, busy cores). nil = ONNX Runtime's
	// default (spin).
	Spinning *bool
	Parallel bool // ExecutionMode ORT_PARALLEL: run independent operators at once
	// MemArena and MemPattern turn ONNX Runtime's CPU memory arena and memory pattern planning
	// on or off (Triton's enable_mem_arena, enable_mem_pattern); nil = its default (on).
	MemArena      *bool
	MemPattern    *bool
	ConfigEntries map[string]string // AddSessionConfigEntry keys (onnxruntime_session_options_config_keys.h)
}

var graphLevels = map[string]C.int{"": 99, "disable": 0, "basic": 1, "extended": 2, "layout": 3, "all": 99}

// Session is a model loaded into ONNX Runtime. Its methods are safe for concurrent use.
type Session struct {
	path    string
	inputs  []TensorInfo
	outputs []TensorInfo
	inIdx   map[string]int
	outIdx  map[string]int

	// mu is held for reading by Run and for writing by Close, so a session is never released
	// under a running call.
	mu       sync.RWMutex
	ptr      *C.OrtSession
	inNames  []*C.char // C copies of the names, for Run
	outNames []*C.char

	// worker runs the long runs while Run waits parked (internal/offload): started at the
	// first, ended by Close. last is the last run's time.
	workerMu sync.Mutex
	worker   *C.td_offload
	last     atomic.Int64
}

// thread returns the session's own thread, starting it; NULL if it cannot start (the run
// then happens in place).
func (s *Session) thread() *C.td_offload {
	s.workerMu.Lock()
	defer s.workerMu.Unlock()
	if s.worker == nil {
		s.worker = C.td_offload_new()
	}
	return s.worker
}

// NewSession loads the model at path (an .onnx file; external data files are read from its
// folder). It calls Init("") if Init has not succeeded yet.
func NewSession(path string, o Options) (*Session, error) {
	if err := Init(""); err != nil {
		return nil, err
	}
	level, ok := graphLevels[o.GraphOptimization]
	if !ok {
		return nil, &Error{Op: "options", kind: ErrBadInput, Msg: fmt.Sprintf(
			"graph optimization %q is not one of disable, basic, extended, layout, all", o.GraphOptimization)}
	}
	if o.IntraOpThreads < 0 || o.InterOpThreads < 0 {
		return nil, &Error{Op: "options", kind: ErrBadInput, Msg: "thread counts must be 0 (the default) or more"}
	}
	if st, err := os.Stat(path); err != nil || !st.Mode().IsRegular() {
		return nil, &Error{Op: "load", kind: ErrBadModel, Msg: fmt.Sprintf("no model file at %s", path)}
	}
	entries := map[string]string{}
	if memoryLimit() > 0 {
		entries["session.use_env_allocators"] = "1" // SetMemoryLimit's arena
	}
	if o.Spinning != nil {
		v := "0"
		if *o.Spinning {
			v = "1"
		}
		entries["session.intra_op.allow_spinning"] = v
		entries["session.inter_op.allow_spinning"] = v
	}
	for k, v := range o.ConfigEntries {
		// ONNX Runtime takes C strings: a NUL would cut them short.
		if k == "" || len(k) > 1024 || strings.ContainsRune(k, 0) || strings.ContainsRune(v, 0) {
			return nil, &Error{Op: "options", kind: ErrBadInput, Msg: fmt.Sprintf(
				"session config entry %q = %q: keys are 1 to 1024 bytes, and neither may hold a NUL", k, v)}
		}
		entries[k] = v
	}
	keys := make([]string, 0, len(entries))
	for k := range entries {
		keys = append(keys, k)
	}
	sort.Strings(keys)
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
	copts := C.ort_options{
		intra_op_threads: C.int(o.IntraOpThreads),
		inter_op_threads: C.int(o.InterOpThreads),
		graph_opt_level:  level,
		config_count:     C.size_t(len(keys)),
	}
	if o.Parallel {
		copts.parallel = 1
	}
	copts.mem_arena, copts.mem_pattern = tristate(o.MemArena), tristate(o.MemPattern)
	if len(keys) > 0 {
		// In C memory, so that the options passed to C hold no Go pointer.
		ck := (*[1 << 20]*C.char)(C.malloc(C.size_t(len(keys)) * C.size_t(unsafe.Sizeof((*C.char)(nil)))))[:len(keys):len(keys)]
		cv := (*[1 << 20]*C.char)(C.malloc(C.size_t(len(keys)) * C.size_t(unsafe.Sizeof((*C.char)(nil)))))[:len(keys):len(keys)]
		cleanup = append(cleanup, unsafe.Pointer(&ck[0]), unsafe.Pointer(&cv[0]))
		for i, k := range keys {
			ck[i], cv[i] = cstr(k), cstr(entries[k])
		}
		copts.config_keys = &ck[0]
		copts.config_values = &cv[0]
	}
	var ptr *C.OrtSession
	if err := statusError("load "+path, C.ort_session_new(cstr(path), &copts, &ptr), ErrBadModel); err != nil {
		return nil, err
	}
	s := &Session{path: path, ptr: ptr}
	var err error
	if s.inputs, err = s.readIO(0); err == nil {
		s.outputs, err = s.readIO(1)
	}
	if err != nil {
		C.ort_session_free(ptr)
		return nil, err
	}
	s.inIdx, s.inNames = index(s.inputs)
	s.outIdx, s.outNames = index(s.outputs)
	return s, nil
}

// tristate is -1 for nil (the default), else 0 or 1.
func tristate(b *bool) C.int {
	switch {
	case b == nil:
		return -1
	case *b:
		return 1
	}
	return 0
}

func index(infos []TensorInfo) (map[string]int, []*C.char) {
	m := make(map[string]int, len(infos))
	names := make([]*C.char, len(infos))
	for i, t := range infos {
		m[t.Name] = i
		names[i] = C.CString(t.Name)
	}
	return m, names
}

// readIO reads the session's inputs (output 0) or outputs (1).
func (s *Session) readIO(output C.int) ([]TensorInfo, error) {
	var n C.size_t
	if err := statusError("read the model's inputs and outputs", C.ort_session_io_count(s.ptr, output, &n), nil); err != nil {
		return nil, err
	}
	out := make([]TensorInfo, int(n))
	for i := range out {
		var info C.ort_io_info
		e := C.ort_session_io(s.ptr, output, C.size_t(i), &info)
		if err := statusError("read the model's inputs and outputs", e, nil); err != nil {
			C.ort_io_info_free(&info)
			return nil, err
		}
		t := TensorInfo{Name: C.GoString(info.name)}
		if info.onnx_type == C.ONNX_TYPE_TENSOR && info.has_shape == 0 {
			t.Type = ElemType(info.elem)
		} else if info.onnx_type == C.ONNX_TYPE_TENSOR {
			t.Type = ElemType(info.elem)
			nd := int(info.ndims)
			t.Shape = make([]int64, nd)
			t.DimNames = make([]string, nd)
			if nd > 0 {
				dims := unsafe.Slice((*int64)(unsafe.Pointer(info.dims)), nd)
				names := unsafe.Slice(info.dim_names, nd)
				for d := 0; d < nd; d++ {
					t.Shape[d] = dims[d]
					t.DimNames[d] = C.GoString(names[d])
				}
			}
		}
		C.ort_io_info_free(&info)
		out[i] = t
	}
	return out, nil
}

// Path is the model file the session was loaded from.
func (s *Session) Path() string { return s.path }

// Inputs describes the model's inputs, in the graph's order. The caller must not modify them.
func (s *Session) Inputs() []TensorInfo { return s.inputs }

// Outputs describes the model's outputs, in the graph's order. The caller must not modify them.
func (s *Session) Outputs() []TensorInfo { return s.outputs }

// Close releases the session, after the runs in progress end. A second Close does nothing.
func (s *Session) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ptr == nil {
		return nil
	}
	if s.worker != nil {
		C.td_offload_free(unsafe.Pointer(s.worker))
		s.worker = nil
	}
	C.ort_session_free(s.ptr)
	s.ptr = nil
	for _, p := range append(s.inNames, s.outNames...) {
		C.free(unsafe.Pointer(p))
	}
	s.inNames, s.outNames = nil, nil
	return nil
}

func names(infos []TensorInfo) string {
	n := make([]string, len(infos))
	for i, t := range infos {
		n[i] = t.Name
	}
	return strings.Join(n, ", ")
}
