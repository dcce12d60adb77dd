package torch

/*
#include <stdlib.h>
#include "torchd.h"
*/
import "C"

import (
	"archive/zip"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"unsafe"
)

// Module is a loaded TorchScript module in eval mode. Run is safe from several goroutines
// at once; Close waits for running calls.
type Module struct {
	mu      sync.RWMutex // Run holds it shared, Close exclusively
	h       *C.td_module
	device  string
	clock   forwardClock // of all methods: a module serves one
	cleanup runtime.Cleanup
}

type loadOptions struct {
	device      string
	flags       C.int
	fp32Modules []string
}

// LoadOption configures Load.
type LoadOption func(*loadOptions)

// WithDevice loads the module onto device: "cpu" (the default), "cuda" or "cuda:N".
// Inputs on the CPU are moved there by Run; outputs stay there (see Tensor.ToCPU).
func WithDevice(device string) LoadOption { return func(o *loadOptions) { o.device = device } }

// WithFreeze applies torch.jit.freeze, inlining parameters and attributes as constants.
// Every method is kept.
func WithFreeze() LoadOption { return func(o *loadOptions) { o.flags |= C.TD_LOAD_FREEZE } }

// WithBF16 runs the module under autocast to bfloat16: matrix products and convolutions in
// bfloat16, the ops autocast keeps in float32 in float32. Floating outputs are float32.
// fp32Modules names submodules (dotted paths, as named_modules gives them) that stay float32,
// as mixed precision keeps numerically sensitive layers: their calls run with autocast off.
func WithBF16(fp32Modules ...string) LoadOption {
	return func(o *loadOptions) {
		o.flags |= C.TD_LOAD_BF16
		o.fp32Modules = fp32Modules
	}
}

// WithOptimize applies torch.jit.optimize_for_inference, which implies freezing.
func WithOptimize() LoadOption { return func(o *loadOptions) { o.flags |= C.TD_LOAD_OPTIMIZE } }

// ErrFP32Modules is wrapped by Load's error when a module named by WithBF16 cannot stay
// float32: forward calls no submodule of that name, or it is no dotted path, or its call
// takes or returns other than one tensor. It is the caller's error, not the runtime's.
var ErrFP32Modules = errors.New("float32 modules")

// ErrNotTorchScript is wrapped by Load's error for a file torch.save wrote (a pickled
// nn.Module or state dict), which only Python can load.
var ErrNotTorchScript = errors.New("not TorchScript")

// isPickle reports whether the file at path is what torch.save writes rather than
// torch.jit.save: a zip with a data.pkl and no constants.pkl, or a legacy pickle stream
// (it starts with pickle's PROTO opcode).
func isPickle(file string) bool {
	f, err := os.Open(file)
	if err != nil {
		return false
	}
	defer f.Close()
	var head [1]byte
	if _, err := io.ReadFull(f, head[:]); err != nil {
		return false
	}
	if head[0] == 0x80 {
		return true
	}
	st, err := f.Stat()
	if err != nil {
		return false
	}
	z, err := zip.NewReader(f, st.Size())
	if err != nil {
		return false
	}
	data, constants := false, false
	for _, e := range z.File {
		data = data || filepath.Base(e.Name) == "data.pkl"
		constants = constants || filepath.Base(e.Name) == "constants.pkl"
	}
	return data && !constants
}

// Load reads a TorchScript module saved by torch.jit.save.
func Load(path string, opts ...LoadOption) (*Module, error) {
	o := loadOptions{device: "cpu"}
	for _, opt := range opts {
		opt(&o)
	}
	// LibTorch reports a missing file as a stream failure; say it plainly.
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("torch: load %s: %w", path, err)
	}
	cpath, freePath := cstring(path)
	defer freePath()
	cdev, freeDev := cstring(o.device)
	defer freeDev()
	for _, name := range o.fp32Modules {
		if name == "" || strings.Contains(name, ",") {
			return nil, fmt.Errorf("torch: load %s: float32 module %q: want a dotted submodule path: %w", path, name, ErrFP32Modules)
		}
	}
	cfp32, freeFP32 := cstring(strings.Join(o.fp32Modules, ","))
	defer freeFP32()
	var h *C.td_module
	if err := statusError("load "+path, C.td_module_load(cpath, cdev, o.flags, cfp32, &h)); err != nil {
		if len(o.fp32Modules) > 0 && strings.Contains(err.Error(), ": float32 module") {
			return nil, fmt.Errorf("%w: %w", ErrFP32Modules, err)
		}
		// LibTorch's "failed locating file constants.pkl ... checkpoint file is corrupted" tells
		// the user nothing: the file is sound, only not TorchScript.
		if isPickle(path) {
			return nil, fmt.Errorf("%w: %s is a pickled Python object (torch.save of a model or a state dict): script it (torch.jit.script or torch.jit.trace, then torch.jit.save), or archive it with --model-file and the model's Python class, which a handler process loads",
				ErrNotTorchScript, filepath.Base(path))
		}
		return nil, err
	}
	dev := C.td_module_device(h)
	m := &Module{h: h, device: C.GoString(dev)}
	C.td_error_free(dev)
	m.cleanup = runtime.AddCleanup(m, func(h *C.td_module) { C.td_module_free(h) }, h)
	return m, nil
}

// Device returns the device the module runs on, e.g. "cpu" or "cuda:0".
func (m *Module) Device() string { return m.device }

// Forward runs the module's forward method.
func (m *Module) Forward(args ...any) (any, error) { return m.Run("forward", args...) }

// Run runs method with positional args (see Tuple for the Go types of values) under
// InferenceMode. Tensors in the result are owned by the caller: close them with
// Tensor.Close or CloseValue. Go-backed input tensors are pinned for the call only, and
// a result never aliases them.
func (m *Module) Run(method string, args ...any) (any, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.h == nil {
		return nil, ErrClosed
	}
	e := encoder{shapeOff: map[int]int{}, strOff: map[int]int{}}
	defer e.pinner.Unpin()
	if err := e.values(args); err != nil {
		return nil, err
	}
	e.finish()
	var nodes *C.td_node
	if len(e.nodes) > 0 {
		nodes = &e.nodes[0]
	}
	cm, freeMethod := cstring(method)
	defer freeMethod()
	st, res := m.clock.call(m.device, &e.pinner, e.nodes,
		func(res **C.td_result) C.td_error { return C.td_module_run(m.h, cm, nodes, C.int(len(e.nodes)), res) },
		func(efd C.int) *C.td_call { return C.td_module_start(m.h, cm, nodes, C.int(len(e.nodes)), efd) })
	if err := statusError(method, st); err != nil {
		return nil, err
	}
	runtime.KeepAlive(e.tensors)
	defer C.td_result_free(res)
	var n C.int
	p := C.td_result_nodes(res, &n)
	d := decoder{nodes: unsafe.Slice(p, int(n))}
	v, err := d.value()
	if err != nil {
		// Free the handles not yet taken over by Go tensors.
		for i := d.pos; i < len(d.nodes); i++ {
			if d.nodes[i].kind == C.TD_TENSOR && d.nodes[i].tensor != nil {
				C.td_tensor_free(d.nodes[i].tensor)
			}
		}
		return nil, err
	}
	return v, nil
}

// Schema returns method's TorchScript schema, e.g. "forward(__torch__.Net self, Tensor x) -> Tensor".
func (m *Module) Schema(method string) (string, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.h == nil {
		return "", ErrClosed
	}
	cm, freeMethod := cstring(method)
	defer freeMethod()
	var out *C.char
	if err := statusError("schema "+method, C.td_module_schema(m.h, cm, &out)); err != nil {
		return "", err
	}
	s := C.GoString(out)
	C.td_error_free(out)
	return s, nil
}

// Close frees the module after running calls finish. It is idempotent.
func (m *Module) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.h != nil {
		m.cleanup.Stop()
		C.td_module_free(m.h)
		m.h = nil
	}
	return nil
}
