package torch

/*
#include <stdlib.h>
#include "torchd.h"
*/
import "C"

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"unsafe"
)

// Package is a loaded AOTInductor package (.pt2, made by torch.export and
// torch._inductor.aoti_compile_and_package). Forward is safe from several goroutines at once;
// up to Runners calls run in parallel and more wait for a free runner. Close waits for
// running calls.
type Package struct {
	mu      sync.RWMutex // Forward holds it shared, Close exclusively
	h       *C.td_package
	dir     string // the extracted package, removed by Close
	device  string
	runners int
	meta    map[string]string
	inputs  []Spec
	outputs []Spec
	clock   forwardClock
	cleanup runtime.Cleanup
}

// Spec describes one input or output of a package. Shape has -1 for a dynamic dimension;
// Min and Max bound every dimension (equal for a static one). Outputs carry no bounds.
type Spec struct {
	Name  string  `json:"name"`
	DType string  `json:"dtype"`
	Shape []int64 `json:"shape"`
	Min   []int64 `json:"min,omitempty"`
	Max   []int64 `json:"max,omitempty"`
}

// The metadata keys torchd reads from a package, written at export time into
// inductor_configs["aot_inductor.metadata"] (models/pt2.py). AOTInductor itself records no
// input shapes or dynamic ranges that its loader exposes, and does not enforce the ranges.
const (
	MetaInputs  = "torchd.inputs"  // JSON list of Spec with Min and Max
	MetaOutputs = "torchd.outputs" // JSON list of Spec
	MetaMarch   = "torchd.march"   // the -march the package was compiled with, e.g. x86-64-v3
)

type packageOptions struct {
	device  string
	model   string
	runners int
	inputs  []Spec // for a package without torchd's metadata
}

// PackageOption configures LoadPackage.
type PackageOption func(*packageOptions)

// WithPackageDevice loads the package on device: "cpu" (the default) or "cuda:N". The
// package must have been compiled for that kind of device.
func WithPackageDevice(device string) PackageOption {
	return func(o *packageOptions) { o.device = device }
}

// WithModelName picks a model of a package that holds several; the default is "model".
func WithModelName(name string) PackageOption { return func(o *packageOptions) { o.model = name } }

// WithInputSpecs gives the input specs of a package made without torchd's metadata (plain
// aoti_compile_and_package), read from its generated code or declared by a config; a package
// that records its own ignores them.
func WithInputSpecs(specs []Spec) PackageOption {
	return func(o *packageOptions) { o.inputs = specs }
}

// WithRunners sets how many Forward calls run at once (default 1): one per worker that
// shares the package. Each runner has its own activation buffers; weights are shared.
func WithRunners(n int) PackageOption { return func(o *packageOptions) { o.runners = n } }

// ReadPackageMetadata returns a package's metadata without loading its compiled code. It
// reads the zip in Go: LibTorch's reader would extract the file into a directory of its own.
func ReadPackageMetadata(path, model string) (map[string]string, error) {
	zr, err := openPackage(path)
	if err != nil {
		return nil, err
	}
	defer zr.Close()
	if model == "" {
		model = "model"
	}
	return readMetadata(path, zr, model)
}

// PackageSpecs parses the input and output specs torchd records in a package's metadata.
func PackageSpecs(md map[string]string) (inputs, outputs []Spec, err error) {
	raw, ok := md[MetaInputs]
	if !ok {
		return nil, nil, fmt.Errorf("torch: package has no %q metadata: export it with its input specs (see README, \"Serving a .pt2\")", MetaInputs)
	}
	if err := json.Unmarshal([]byte(raw), &inputs); err != nil {
		return nil, nil, fmt.Errorf("torch: package metadata %q: %w", MetaInputs, err)
	}
	if len(inputs) == 0 {
		return nil, nil, fmt.Errorf("torch: package metadata %q lists no inputs", MetaInputs)
	}
	for _, s := range inputs {
		if _, err := ParseDType(s.DType); err != nil {
			return nil, nil, fmt.Errorf("torch: package input %q: %w", s.Name, err)
		}
		if len(s.Min) != len(s.Shape) || len(s.Max) != len(s.Shape) {
			return nil, nil, fmt.Errorf("torch: package input %q: shape %v needs min and max of the same rank, have %v and %v", s.Name, s.Shape, s.Min, s.Max)
		}
		for d := range s.Shape {
			if s.Min[d] < 0 || s.Min[d] > s.Max[d] || (s.Shape[d] >= 0 && (s.Min[d] != s.Shape[d] || s.Max[d] != s.Shape[d])) {
				return nil, nil, fmt.Errorf("torch: package input %q: dimension %d of shape %v has bounds [%d, %d]", s.Name, d, s.Shape, s.Min[d], s.Max[d])
			}
		}
	}
	if raw, ok := md[MetaOutputs]; ok {
		if err := json.Unmarshal([]byte(raw), &outputs); err != nil {
			return nil, nil, fmt.Errorf("torch: package metadata %q: %w", MetaOutputs, err)
		}
	}
	return inputs, outputs, nil
}

// LoadPackage loads the AOTInductor package at path. It refuses, with an error and before
// the package's compiled library is loaded, a package whose entries would leave the directory
// it is extracted to, one whose files do not match the sizes and checksums it records or
// whose library is not a whole ELF shared library for this machine (pt2file.go), one compiled
// for another device kind or for CPU features this host lacks, and one without torchd's input
// specs. The package is extracted into a directory of torchd's that Close removes. It is safe
// to call from several goroutines: loads take turns in the C ABI, since LibTorch's loader
// parses into shared state.
func LoadPackage(path string, opts ...PackageOption) (_ *Package, err error) {
	o := packageOptions{device: "cpu", model: "model", runners: 1}
	for _, opt := range opts {
		opt(&o)
	}
	if o.model == "" {
		o.model = "model"
	}
	zr, err := openPackage(path)
	if err != nil {
		return nil, err
	}
	defer zr.Close()
	md, err := readMetadata(path, zr, o.model)
	if err != nil {
		return nil, err
	}
	var inputs, outputs []Spec
	if _, ok := md[MetaInputs]; ok || o.inputs == nil {
		if inputs, outputs, err = PackageSpecs(md); err != nil {
			return nil, err
		}
	} else {
		inputs = o.inputs
	}
	dir, err := extractPackage(path, zr)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	if err := checkLibraries(path, dir, zr, o.model); err != nil {
		return nil, err
	}
	var lines strings.Builder
	for k, v := range md {
		lines.WriteString(k + "\t" + v + "\n")
	}
	cdir, freeDir := cstring(dir)
	defer freeDir()
	cpath, freePath := cstring(path)
	defer freePath()
	cmodel, freeModel := cstring(o.model)
	defer freeModel()
	cdev, freeDev := cstring(o.device)
	defer freeDev()
	cmeta, freeMeta := cstring(lines.String())
	defer freeMeta()
	var h *C.td_package
	if err := statusError("load package "+path, C.td_package_load(cdir, cpath, cmodel, cdev, cmeta, C.int(o.runners), &h)); err != nil {
		return nil, err
	}
	dev := C.td_package_device(h)
	p := &Package{h: h, dir: dir, device: C.GoString(dev), runners: o.runners, meta: md, inputs: inputs, outputs: outputs}
	C.td_error_free(dev)
	p.cleanup = runtime.AddCleanup(p, func(r loadedPackage) {
		C.td_package_free(r.h)
		os.RemoveAll(r.dir)
	}, loadedPackage{h, dir})
	return p, nil
}

// loadedPackage is what a Package that was never closed leaves to its cleanup.
type loadedPackage struct {
	h   *C.td_package
	dir string
}

// Device returns the device the package runs on, e.g. "cpu".
func (p *Package) Device() string { return p.device }

// Runners returns how many Forward calls can run at once.
func (p *Package) Runners() int { return p.runners }

// Inputs returns the package's input specs.
func (p *Package) Inputs() []Spec { return p.inputs }

// Outputs returns the package's output specs; nil when the package records none.
func (p *Package) Outputs() []Spec { return p.outputs }

// Metadata returns a copy of the package's metadata.
func (p *Package) Metadata() map[string]string {
	md := make(map[string]string, len(p.meta))
	for k, v := range p.meta {
		md[k] = v
	}
	return md
}

// BatchRange returns the range of the leading (batch) dimension the package was exported
// with: the intersection of its inputs' ranges.
func (p *Package) BatchRange() (lo, hi int64) {
	lo, hi = 0, int64(1)<<62
	for _, s := range p.inputs {
		if len(s.Shape) == 0 {
			continue
		}
		lo, hi = max(lo, s.Min[0]), min(hi, s.Max[0])
	}
	return lo, hi
}

// CheckInputs checks a call's tensors against the input specs: count, dtype, rank and every
// dimension within its exported bounds. The compiled code checks none of these, and reads
// out of bounds on a mismatch.
func (p *Package) CheckInputs(args []any) error {
	if len(args) != len(p.inputs) {
		return fmt.Errorf("torch: package takes %d inputs, got %d", len(p.inputs), len(args))
	}
	for i, a := range args {
		t, ok := a.(*Tensor)
		if !ok {
			return fmt.Errorf("torch: package input %d is %s; a package takes tensors only", i, TypeName(a))
		}
		s := p.inputs[i]
		if t.DType().String() != s.DType {
			return fmt.Errorf("torch: package input %q is %v, not %s", s.Name, t.DType(), s.DType)
		}
		shape := t.Shape()
		if len(shape) != len(s.Shape) {
			return fmt.Errorf("torch: package input %q has shape %v, want rank %d (%v)", s.Name, shape, len(s.Shape), s.Shape)
		}
		for d, n := range shape {
			if n < s.Min[d] || n > s.Max[d] {
				if s.Min[d] == s.Max[d] {
					return fmt.Errorf("torch: package input %q has shape %v, want %v", s.Name, shape, s.Shape)
				}
				return fmt.Errorf("torch: package input %q: dimension %d is %d, outside the exported range [%d, %d]", s.Name, d, n, s.Min[d], s.Max[d])
			}
		}
	}
	return nil
}

// Forward runs the package on tensors under InferenceMode, after CheckInputs. It returns one
// *Tensor for a single output, else a Tuple of them, owned by the caller.
func (p *Package) Forward(args ...any) (any, error) {
	if err := p.CheckInputs(args); err != nil {
		return nil, err
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.h == nil {
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
	st, res := p.clock.call(p.device, &e.pinner, e.nodes,
		func(res **C.td_result) C.td_error { return C.td_package_run(p.h, nodes, C.int(len(e.nodes)), res) },
		func(efd C.int) *C.td_call { return C.td_package_start(p.h, nodes, C.int(len(e.nodes)), efd) })
	if err := statusError("run package", st); err != nil {
		return nil, err
	}
	runtime.KeepAlive(e.tensors)
	defer C.td_result_free(res)
	var n C.int
	ptr := C.td_result_nodes(res, &n)
	d := decoder{nodes: unsafe.Slice(ptr, int(n))}
	v, err := d.value()
	if err != nil {
		for i := d.pos; i < len(d.nodes); i++ {
			if d.nodes[i].kind == C.TD_TENSOR && d.nodes[i].tensor != nil {
				C.td_tensor_free(d.nodes[i].tensor)
			}
		}
		return nil, err
	}
	return v, nil
}

// CallSpec returns the package's pytree input and output specs, as JSON.
func (p *Package) CallSpec() (in, out string, err error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.h == nil {
		return "", "", ErrClosed
	}
	var ci, co *C.char
	if err := statusError("package call spec", C.td_package_call_spec(p.h, &ci, &co)); err != nil {
		return "", "", err
	}
	in, out = C.GoString(ci), C.GoString(co)
	C.td_error_free(ci)
	C.td_error_free(co)
	return in, out, nil
}

// Close frees the package after running calls finish. It is idempotent.
func (p *Package) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.h != nil {
		p.cleanup.Stop()
		C.td_package_free(p.h)
		p.h = nil
		os.RemoveAll(p.dir)
	}
	return nil
}
