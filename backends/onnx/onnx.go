// Package onnx is the ONNX Runtime backend (core.Runtime): it loads a model's .onnx file
// (or a Triton config's onnxruntime_onnx model) into ONNX Runtime sessions, in this process,
// and runs the batches core's workers hand it. It knows sessions and tensors; the binding
// (package onnxrt) knows ONNX Runtime's C API; core knows neither.
package onnx

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/archive/triton"
	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/handlers"
	"github.com/torchd/torchd/internal/bytestr"
	"github.com/torchd/torchd/onnxrt"
	"github.com/torchd/torchd/torch"
)

// Name is the runtime's name in configs and describe.
const Name = triton.RuntimeONNX

// Backend loads ONNX models. Its zero value searches for ONNX Runtime's library where
// onnxrt.Init does.
type Backend struct {
	// Library is the path of libonnxruntime ("": onnxrt's search).
	Library string
	// MemoryLimit caps, in bytes, what all ONNX models' runs allocate together
	// (onnxrt.SetMemoryLimit), set before the first session; 0: none.
	MemoryLimit int64

	limitOnce sync.Once
	limitErr  error
}

var (
	_ core.Runtime       = (*Backend)(nil)
	_ core.Model         = (*Model)(nil)
	_ core.Signed        = (*Model)(nil)
	_ core.HandlerBinder = (*Model)(nil)
)

// Name is "onnxruntime".
func (*Backend) Name() string { return Name }

// Accepts a model whose config names ONNX Runtime, or whose serialized file is .onnx.
func (*Backend) Accepts(am *archive.Model) bool {
	return am.Config.Runtime == Name || am.Config.Runtime == "" && am.Config.Handler != archive.HandlerPython && archive.IsONNXName(am.SerializedFile)
}

// Load opens one session, to check the model and read its signature; the other workers'
// sessions open as they first run (at their warm-up).
func (b *Backend) Load(req core.LoadRequest) (core.Model, error) {
	s := req.Settings
	if s.Device != "" && s.Device != "cpu" {
		return nil, fmt.Errorf("device %s: torchd runs ONNX Runtime's CPU build; serve this model on the CPU (device cpu, or KIND_CPU)", s.Device)
	}
	if err := onnxrt.Init(b.Library); err != nil {
		return nil, fmt.Errorf("ONNX Runtime is not available: %v", err)
	}
	if err := b.setMemoryLimit(); err != nil {
		return nil, err
	}
	opts, err := options(req.Archive.Config.RuntimeOptions, req.Threads)
	if err != nil {
		return nil, err
	}
	m := &Model{path: req.Archive.SerializedPath(), opts: opts, limit: max(1, s.MaxWorkers, s.MinWorkers), am: req.Archive}
	m.free = make(chan *onnxrt.Session, m.limit)
	first, err := onnxrt.NewSession(m.path, opts)
	if err != nil {
		return nil, err
	}
	m.made = 1
	m.free <- first
	m.ins, m.outs = first.Inputs(), first.Outputs()
	for _, t := range append(append([]onnxrt.TensorInfo{}, m.ins...), m.outs...) {
		if _, ok := dtypeOf[t.Type]; !ok {
			m.Close()
			return nil, fmt.Errorf("tensor %q is of type %s, which torchd does not serve from ONNX models (it serves %s)", t.Name, t.Type, servedTypes())
		}
	}
	return m, nil
}

// setMemoryLimit applies MemoryLimit once, before any session; a limit already set in this
// process (another server in it, as tests run) stands.
func (b *Backend) setMemoryLimit() error {
	b.limitOnce.Do(func() {
		if b.MemoryLimit > 0 && onnxrt.MemoryLimit() == 0 {
			if err := onnxrt.SetMemoryLimit(b.MemoryLimit); err != nil {
				b.limitErr = fmt.Errorf("onnx_memory_limit: %v", err)
			}
		}
	})
	return b.limitErr
}

// options are the sessions' options: the worker's share of the cores (as LibTorch's
// forwards get), no spinning, and the Triton parameters the config gave.
func options(ro map[string]string, threads int) (onnxrt.Options, error) {
	// Idle pool threads do not spin: a spinning thread takes a core from the HTTP path and the
	// other workers between runs (BERT at c=32 on 2 cores: about 1.4x the requests without it,
	// docs/benchmarks.md).
	spin := false
	o := onnxrt.Options{IntraOpThreads: max(threads, 1), InterOpThreads: 1, Spinning: &spin, ConfigEntries: map[string]string{}}
	switch l := ro[triton.OptionGraphLevel]; l {
	case "", "all":
		o.GraphOptimization = "all"
	case "basic", "extended", "disable":
		o.GraphOptimization = l
	default:
		return o, fmt.Errorf("graph optimization level %q: want disable, basic, extended or all", l)
	}
	if v, ok := ro[triton.ParamORTInterOp]; ok {
		n, _ := strconv.Atoi(v)
		o.InterOpThreads = n
	}
	o.Parallel = ro[triton.ParamORTExecutionMode] == "1"
	if v, ok := ro[triton.ParamORTMemArena]; ok {
		o.ConfigEntries["session.enable_cpu_mem_arena"] = v
	}
	if v, ok := ro[triton.ParamORTMemPattern]; ok {
		o.ConfigEntries["session.enable_mem_pattern"] = v
	}
	return o, nil
}

// Model is a loaded ONNX model: up to one session a worker, each with the worker's threads.
// ONNX Runtime's Run may be called concurrently on one session, but its intra-op pool is the
// session's: workers sharing one would share its threads.
type Model struct {
	path  string
	opts  onnxrt.Options
	am    *archive.Model
	limit int

	ins, outs []onnxrt.TensorInfo // the graph's
	// inNames and outNames are what a sample's tensors are, in their order, and the outputs
	// a batch answers, in theirs: the config's declared ones, else the graph's. Set by
	// BindHandler, after the adapter has settled the config.
	inNames, outNames []string

	mu     sync.Mutex
	made   int
	closed bool
	free   chan *onnxrt.Session
}

// Kind is "onnxruntime".
func (*Model) Kind() string { return Name }

// Device is the CPU: the library is ONNX Runtime's CPU build.
func (*Model) Device() string { return "cpu" }

// Signature is the graph's inputs and outputs, in torchd's dtype names.
var _ core.ThreadBound = (*Model)(nil)

// BoundToThread locks the model's workers to their OS threads when its sessions run an
// intra-op pool: the worker's thread joins it as its first thread, and a run from another
// thread each time cost BERT at c=32 a quarter of its throughput (bench/onnx-ab.sh). A
// one-thread session runs on the caller alone, and is faster unlocked (MNIST: 1.5x).
func (m *Model) BoundToThread() bool { return m.opts.IntraOpThreads > 1 }

func (m *Model) Signature() (ins, outs []archive.TensorSpec) {
	conv := func(ts []onnxrt.TensorInfo) []archive.TensorSpec {
		out := make([]archive.TensorSpec, 0, len(ts))
		for _, t := range ts {
			out = append(out, archive.TensorSpec{Name: t.Name, DType: dtypeOf[t.Type].String(), Shape: append([]int64(nil), t.Shape...)})
		}
		return out
	}
	return conv(m.ins), conv(m.outs)
}

// BindHandler refuses a handler that runs its own LibTorch forward, and settles the names
// the samples' tensors are fed by.
func (m *Model) BindHandler(h handlers.Handler) error {
	_, inferer := h.(handlers.Inferer)
	_, selector := h.(handlers.OutputSelector)
	_, binder := h.(handlers.ModelBinder)
	if inferer || selector || binder {
		return fmt.Errorf("handler %s runs its own LibTorch forward, which an ONNX model has not; serve it with the tensor or image_classifier handler", m.am.Config.Handler)
	}
	m.inNames, m.outNames = nil, nil
	if c := m.am.Config.Inputs; len(c) > 0 {
		for _, in := range c {
			m.inNames = append(m.inNames, in.Name)
		}
	} else {
		for _, in := range m.ins {
			m.inNames = append(m.inNames, in.Name)
		}
	}
	for _, n := range m.inNames {
		if !hasName(m.ins, n) {
			return fmt.Errorf("input %q is not an input of the model (it has %s)", n, names(m.ins))
		}
	}
	if c := m.am.Config.Outputs; len(c) > 0 {
		for _, out := range c {
			if !hasName(m.outs, out.Name) {
				return fmt.Errorf("output %q is not an output of the model (it has %s)", out.Name, names(m.outs))
			}
			m.outNames = append(m.outNames, out.Name)
		}
	} else {
		for _, out := range m.outs {
			m.outNames = append(m.outNames, out.Name)
		}
	}
	return nil
}

// Run runs the batch as one session run when its samples' tensors differ only in rows, else
// each sample alone (requests of different lengths batch as Triton batches them: not at all).
func (m *Model) Run(batch []*handlers.Sample, st *handlers.Stage) ([][]handlers.Tensor, error) {
	if len(batch) == 0 {
		return nil, nil
	}
	s, err := m.session()
	if err != nil {
		return nil, err
	}
	defer m.release(s)
	return handlers.RunRows(batch, st, func(ts []handlers.Tensor) ([]handlers.Tensor, error) { return m.run(s, ts) })
}

// run feeds one set of tensors, by the bound names, and returns the bound outputs.
func (m *Model) run(s *onnxrt.Session, ts []handlers.Tensor) ([]handlers.Tensor, error) {
	if len(ts) != len(m.inNames) {
		return nil, handlers.BadInput("the model takes %d inputs (%s), got %d", len(m.inNames), strings.Join(m.inNames, ", "), len(ts))
	}
	vals := make([]onnxrt.Value, len(ts))
	for i, t := range ts {
		et, ok := elemOf[t.DType]
		if !ok {
			return nil, handlers.BadInput("input %q: type %s is not an ONNX tensor type torchd feeds", m.inNames[i], t.DType)
		}
		vals[i] = onnxrt.Value{Type: et, Shape: t.Shape, Data: t.Data}
		if et == onnxrt.String {
			strs, err := bytestr.Split(t.Data)
			if err != nil {
				return nil, handlers.BadInput("input %q: %v", m.inNames[i], err)
			}
			vals[i] = onnxrt.Value{Type: et, Shape: t.Shape, Strings: strs}
		}
	}
	res, err := s.Run(m.inNames, vals, m.outNames)
	if err != nil {
		if errors.Is(err, onnxrt.ErrBadInput) {
			return nil, handlers.BadInput("%s", err)
		}
		if errors.Is(err, onnxrt.ErrOutOfMemory) {
			if l := onnxrt.MemoryLimit(); l > 0 {
				return nil, fmt.Errorf("out of memory: the run needs more than onnx_memory_limit (%d MiB, for all ONNX models' runs together) leaves: %v", l>>20, err)
			}
		}
		return nil, err
	}
	out := make([]handlers.Tensor, len(res))
	for i, v := range res {
		dt, ok := dtypeOf[v.Type]
		if !ok {
			return nil, fmt.Errorf("output %q is of type %s, which torchd does not serve", m.outNames[i], v.Type)
		}
		data := v.Data
		if v.Type == onnxrt.String {
			data = bytestr.Join(v.Strings)
		}
		out[i] = handlers.Tensor{DType: dt, Shape: v.Shape, Data: data, Name: m.outNames[i]}
	}
	return out, nil
}

// session takes a free session, or opens one while there are fewer than the workers.
func (m *Model) session() (*onnxrt.Session, error) {
	select {
	case s := <-m.free:
		return s, nil
	default:
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, errors.New("the model is closed")
	}
	if m.made < m.limit {
		m.made++
		m.mu.Unlock()
		s, err := onnxrt.NewSession(m.path, m.opts)
		if err != nil {
			m.mu.Lock()
			m.made--
			m.mu.Unlock()
			return nil, err
		}
		return s, nil
	}
	m.mu.Unlock()
	return <-m.free, nil
}

func (m *Model) release(s *onnxrt.Session) {
	m.mu.Lock()
	closed := m.closed
	m.mu.Unlock()
	if closed {
		s.Close()
		return
	}
	m.free <- s
}

// Close closes the idle sessions; a session still running closes when its batch ends.
func (m *Model) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	m.mu.Unlock()
	for {
		select {
		case s := <-m.free:
			s.Close()
		default:
			return nil
		}
	}
}

func hasName(ts []onnxrt.TensorInfo, n string) bool {
	for _, t := range ts {
		if t.Name == n {
			return true
		}
	}
	return false
}

func names(ts []onnxrt.TensorInfo) string {
	var s []string
	for _, t := range ts {
		s = append(s, t.Name)
	}
	return strings.Join(s, ", ")
}

// The element types torchd serves from ONNX models: those its tensors have.
var (
	dtypeOf = map[onnxrt.ElemType]torch.DType{
		onnxrt.Float32: torch.Float32, onnxrt.Float16: torch.Float16, onnxrt.BFloat16: torch.BFloat16,
		onnxrt.Float64: torch.Float64, onnxrt.Int64: torch.Int64, onnxrt.Int32: torch.Int32,
		onnxrt.Uint8: torch.Uint8, onnxrt.Int8: torch.Int8, onnxrt.Bool: torch.Bool, onnxrt.String: torch.Bytes, onnxrt.Int16: torch.Int16,
	}
	elemOf = func() map[torch.DType]onnxrt.ElemType {
		m := map[torch.DType]onnxrt.ElemType{}
		for e, d := range dtypeOf {
			m[d] = e
		}
		return m
	}()
)

func servedTypes() string {
	return "float, float16, bfloat16, double, int64, int32, int16, uint8, int8, bool and string"
}
