// Package openvino is the OpenVINO backend (core.Runtime): it compiles a model's OpenVINO IR
// (model.xml and model.bin: a Triton config's backend "openvino", or an archive whose
// serialized file is an .xml) for the CPU, in this process, and runs the batches core's
// workers hand it, one infer request per worker. It knows compiled models and tensors; the
// binding (package openvino) knows OpenVINO's C API; core knows neither.
package openvino

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/archive/triton"
	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/handlers"
	ov "github.com/torchd/torchd/openvino"
	"github.com/torchd/torchd/torch"
)

// Name is the runtime's name in configs and describe.
const Name = triton.RuntimeOpenVINO

// Backend loads OpenVINO models. Its zero value searches for OpenVINO's library where
// openvino.Init does.
type Backend struct {
	// Library is the path of libopenvino_c ("": the binding's search).
	Library string
}

var (
	_ core.Runtime       = (*Backend)(nil)
	_ core.Model         = (*Model)(nil)
	_ core.Signed        = (*Model)(nil)
	_ core.HandlerBinder = (*Model)(nil)
)

// Name is "openvino".
func (*Backend) Name() string { return Name }

// Accepts a model whose config names OpenVINO, or whose serialized file is an IR's .xml.
func (*Backend) Accepts(am *archive.Model) bool {
	return am.Config.Runtime == Name || am.Config.Runtime == "" && am.Config.Handler != archive.HandlerPython && archive.IsOpenVINOName(am.SerializedFile)
}

// Load compiles the model with a dynamic batch from 1 to its batch size when it batches, and
// as many streams as it has workers, so that their requests run at once, each on the
// worker's threads; beside it, a model compiled for exactly each row count the forwards run
// most often (core.ForwardRows: the forward batch, the preferred batch sizes' forwards).
func (b *Backend) Load(req core.LoadRequest) (core.Model, error) {
	s := req.Settings
	if s.Device != "" && s.Device != "cpu" {
		return nil, fmt.Errorf("device %s: torchd runs OpenVINO on the CPU; serve this model on the CPU (device cpu, or KIND_CPU)", s.Device)
	}
	if err := ov.Init(b.Library); err != nil {
		return nil, fmt.Errorf("OpenVINO is not available: %v", err)
	}
	workers := max(1, s.MaxWorkers, s.MinWorkers)
	ro := req.Archive.Config.RuntimeOptions
	opts, err := options(ro, s.Precision, workers, req.Threads)
	if err != nil {
		return nil, err
	}
	opts.DynamicBatch = s.BatchSize > 1 || len(req.Archive.Config.Inputs) > 0 && batched(req.Archive.Config.Inputs)
	path := req.Archive.SerializedPath()
	m := &Model{am: req.Archive, path: path, workers: workers, static: map[int64]*pool{}}
	if opts.DynamicBatch && s.BatchSize > 1 {
		// Bounded, OpenVINO plans its memory for the batches core hands it.
		opts.MaxBatch = s.BatchSize
		m.fixed = fullBatch(ro)
	}
	m.opts = opts
	// A stream per worker gives each worker's request its share of the cores, so a request that
	// runs alone would leave the others idle; it runs on a model with one stream on all of
	// them instead (as a LibTorch forward takes the idle cores). Not where the config chose
	// the streams or the THROUGHPUT hint. A batch of the sizes compiled for that runs alone
	// is rare (a server whose batches fill has its workers busy), so alone has no twins of
	// them: each would cost as much memory again.
	_, streamsSet := ro[triton.ParamOVNumStreams]
	alone := workers > 1 && !streamsSet && opts.Hint == "LATENCY"
	if m.dyn, err = m.compile(0, false); err == nil && alone {
		m.alone, err = m.compile(0, true)
	}
	if err == nil {
		_, err = m.PlanRows(core.ForwardRows(s))
	}
	if err != nil {
		m.Close()
		return nil, err
	}
	m.ins, m.outs = m.dyn.compiled.Inputs(), m.dyn.compiled.Outputs()
	for _, t := range append(append([]ov.TensorInfo{}, m.ins...), m.outs...) {
		if _, ok := dtypeOf[t.Type]; !ok {
			m.Close()
			return nil, fmt.Errorf("tensor %q is of type %s, which torchd does not serve from OpenVINO models (it serves f32, f16, bf16, f64, i64, i32, i16, i8, u8 and boolean)", t.Name, t.Type)
		}
		if t.Name == "" {
			m.Close()
			return nil, errors.New("an input or output of the model has no tensor name; name it in the IR (names= on its port), as clients address tensors by name")
		}
	}
	return m, nil
}

// compile compiles the model for batches of rows rows (0: the dynamic batch), with a stream
// per worker, or with one (lone) for the batch that runs alone.
func (m *Model) compile(rows int, lone bool) (*pool, error) {
	o, limit := m.opts, m.workers
	if lone {
		// One batch runs alone at a time.
		o.Streams, limit = 1, 1
	}
	if rows > 0 {
		o.DynamicBatch, o.MaxBatch, o.Batch = false, 0, rows
	}
	c, err := ov.Compile(m.path, o)
	if errors.Is(err, ov.ErrBadModel) {
		return nil, fmt.Errorf("%s: %v", filepath.Base(m.path), err)
	}
	if err != nil {
		return nil, err
	}
	return newPool(c, limit), nil
}

// PlanRows keeps a model compiled for each of rows and for no other count (core calls it
// before the workers start, once forward_batch is settled), and returns the counts it kept:
// each costs the memory of a compiled model and its activations. A graph that compiles with
// a dynamic batch but not for a fixed one (a shape computed from the batch, say) serves every
// batch on the dynamic model.
func (m *Model) PlanRows(rows []int) ([]int, error) {
	if !m.fixed {
		return nil, nil
	}
	for n, p := range m.static {
		if !slices.Contains(rows, int(n)) {
			delete(m.static, n)
			if err := p.close(); err != nil {
				return nil, err
			}
		}
	}
	for _, n := range rows {
		if _, ok := m.static[int64(n)]; ok || n < 1 {
			continue
		}
		if p, err := m.compile(n, false); err == nil {
			m.static[int64(n)] = p
		}
	}
	var kept []int
	for n := range m.static {
		kept = append(kept, int(n))
	}
	slices.Sort(kept)
	return kept, nil
}

// fullBatch reports whether the config leaves the fixed-size models on (FULL_BATCH_MODEL
// "false" turns them off: each costs the memory of another compiled model).
func fullBatch(ro map[string]string) bool {
	return ro[triton.ParamOVFullBatchModel] != "false"
}

// batched reports whether the declared inputs have a variable first dimension (Triton's
// max_batch_size > 0 puts it there).
func batched(specs []archive.TensorSpec) bool {
	for _, t := range specs {
		if len(t.Shape) == 0 || t.Shape[0] != -1 {
			return false
		}
	}
	return true
}

// options are the compile options: the config's parameters, else LATENCY with a stream per
// worker and the workers' threads together. The precision is f32 unless the model's
// settings ask for bf16 or fp16: OpenVINO would otherwise pick bf16 on AMX machines by
// itself, where the model's accuracy was never measured.
func options(ro map[string]string, precision string, workers, threads int) (ov.Options, error) {
	o := ov.Options{Hint: "LATENCY", Streams: workers, Threads: workers * max(threads, 1), Precision: "f32",
		Unpinned: ro[triton.ParamOVCPUPinning] != "true"}
	switch precision {
	case "bf16":
		o.Precision = "bf16"
	case "fp16":
		o.Precision = "f16"
	}
	if v, ok := ro[triton.ParamOVPrecision]; ok {
		o.Precision = v
	}
	if v, ok := ro[triton.ParamOVPerformanceHint]; ok {
		o.Hint = v
	}
	if v, ok := ro[triton.ParamOVNumStreams]; ok {
		n, err := strconv.Atoi(v)
		if err != nil {
			return o, fmt.Errorf("NUM_STREAMS %q is not a count", v)
		}
		o.Streams = n // 0: the hint's choice
	}
	return o, nil
}

// Model is a loaded OpenVINO model: its compiled variants, each with up to one infer request a
// worker.
type Model struct {
	am *archive.Model
	// dyn runs any batch, on a stream per worker; static, by rows, the forwards of those
	// rows, compiled for that size (PlanRows); alone runs any batch with one stream on every
	// worker's threads, while no other batch runs (nil with one worker).
	dyn, alone *pool
	static     map[int64]*pool
	running    atomic.Int32
	// What compile needs: the IR, its options, the workers; fixed: models compiled per row
	// count are on (FULL_BATCH_MODEL).
	path    string
	opts    ov.Options
	workers int
	fixed   bool

	ins, outs []ov.TensorInfo // the compiled graph's
	// inIdx maps each sample tensor (the config's declared inputs, else the graph's, in
	// their order) to its graph input; outNames are the outputs a batch answers, in the
	// config's order, outIdx their graph outputs. Set by BindHandler.
	inIdx    []int
	outNames []string
	outIdx   []int
}

// pool is one compiled model and its infer requests, made as they are first needed, up to
// limit.
type pool struct {
	compiled *ov.Model
	limit    int
	mu       sync.Mutex
	made     int
	closed   bool
	free     chan *ov.Request
}

func newPool(c *ov.Model, limit int) *pool {
	return &pool{compiled: c, limit: limit, free: make(chan *ov.Request, limit)}
}

// get takes a free infer request, or makes one while there are fewer than the limit.
func (p *pool) get() (*ov.Request, error) {
	select {
	case r := <-p.free:
		return r, nil
	default:
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, errors.New("the model is closed")
	}
	if p.made < p.limit {
		p.made++
		p.mu.Unlock()
		r, err := p.compiled.NewRequest()
		if err != nil {
			p.mu.Lock()
			p.made--
			p.mu.Unlock()
			return nil, err
		}
		return r, nil
	}
	p.mu.Unlock()
	return <-p.free, nil
}

func (p *pool) put(r *ov.Request) {
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed {
		r.Close()
		return
	}
	p.free <- r
}

// close releases the compiled model and its requests; nil is a variant never compiled.
func (p *pool) close() error {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	done := p.closed
	p.closed = true
	p.mu.Unlock()
	if done {
		return nil
	}
	return p.compiled.Close()
}

// Kind is "openvino".
func (*Model) Kind() string { return Name }

// Device is the CPU.
func (*Model) Device() string { return "cpu" }

// Signature is the graph's inputs and outputs, in torchd's dtype names.
func (m *Model) Signature() (ins, outs []archive.TensorSpec) {
	conv := func(ts []ov.TensorInfo) []archive.TensorSpec {
		out := make([]archive.TensorSpec, 0, len(ts))
		for _, t := range ts {
			out = append(out, archive.TensorSpec{Name: t.Name, DType: dtypeOf[t.Type].String(), Shape: append([]int64(nil), t.Shape...)})
		}
		return out
	}
	return conv(m.ins), conv(m.outs)
}

// BindHandler refuses a handler that runs its own LibTorch forward, and settles which graph
// input each sample tensor feeds and which outputs a batch answers.
func (m *Model) BindHandler(h handlers.Handler) error {
	_, inferer := h.(handlers.Inferer)
	_, selector := h.(handlers.OutputSelector)
	_, binder := h.(handlers.ModelBinder)
	if inferer || selector || binder {
		return fmt.Errorf("handler %s runs its own LibTorch forward, which an OpenVINO model has not; serve it with the tensor or image_classifier handler", m.am.Config.Handler)
	}
	m.inIdx, m.outNames, m.outIdx = nil, nil, nil
	if c := m.am.Config.Inputs; len(c) > 0 {
		if len(c) != len(m.ins) {
			return fmt.Errorf("the config declares %d inputs; the model has %d (%s)", len(c), len(m.ins), names(m.ins))
		}
		for _, in := range c {
			k := index(m.ins, in.Name)
			if k < 0 {
				return fmt.Errorf("input %q is not an input of the model (it has %s)", in.Name, names(m.ins))
			}
			m.inIdx = append(m.inIdx, k)
		}
	} else {
		for k := range m.ins {
			m.inIdx = append(m.inIdx, k)
		}
	}
	if c := m.am.Config.Outputs; len(c) > 0 {
		for _, out := range c {
			k := index(m.outs, out.Name)
			if k < 0 {
				return fmt.Errorf("output %q is not an output of the model (it has %s)", out.Name, names(m.outs))
			}
			m.outNames, m.outIdx = append(m.outNames, out.Name), append(m.outIdx, k)
		}
	} else {
		for k, out := range m.outs {
			m.outNames, m.outIdx = append(m.outNames, out.Name), append(m.outIdx, k)
		}
	}
	return nil
}

// Run runs the batch as one inference when its samples' tensors differ only in rows, else
// each sample alone.
func (m *Model) Run(batch []*handlers.Sample, st *handlers.Stage) ([][]handlers.Tensor, error) {
	if len(batch) == 0 {
		return nil, nil
	}
	// The count is given back after the requests: while one runs alone, no other batch sees
	// itself alone, so alone's one request serves one batch at a time.
	lone := m.running.Add(1) == 1
	defer m.running.Add(-1)
	return handlers.RunRows(batch, st, func(ts []handlers.Tensor) ([]handlers.Tensor, error) {
		p := m.pick(lone, ts)
		r, err := p.get()
		if err != nil {
			return nil, err
		}
		defer p.put(r)
		return m.run(r, ts)
	})
}

// pick is the variant that runs ts: alone where the batch runs alone, else the model
// compiled for its rows where every input has that many, else the dynamic one.
func (m *Model) pick(lone bool, ts []handlers.Tensor) *pool {
	if lone && m.alone != nil {
		return m.alone
	}
	if len(ts) == 0 || len(ts[0].Shape) == 0 {
		return m.dyn
	}
	p := m.static[ts[0].Shape[0]]
	for _, t := range ts[1:] {
		if len(t.Shape) == 0 || t.Shape[0] != ts[0].Shape[0] {
			return m.dyn
		}
	}
	if p != nil {
		return p
	}
	return m.dyn
}

// run feeds one set of tensors to their graph inputs and returns the bound outputs.
func (m *Model) run(r *ov.Request, ts []handlers.Tensor) ([]handlers.Tensor, error) {
	if len(ts) != len(m.inIdx) {
		return nil, handlers.BadInput("the model takes %d inputs (%s), got %d", len(m.ins), names(m.ins), len(ts))
	}
	vals := make([]ov.Value, len(m.ins))
	for i, t := range ts {
		k := m.inIdx[i]
		et, ok := elemOf[t.DType]
		if !ok {
			return nil, handlers.BadInput("input %q: type %s is not a tensor type torchd feeds OpenVINO", m.ins[k].Name, t.DType)
		}
		vals[k] = ov.Value{Type: et, Shape: t.Shape, Data: t.Data}
	}
	res, err := r.Infer(vals)
	if err != nil {
		if errors.Is(err, ov.ErrBadInput) {
			return nil, handlers.BadInput("%s", err)
		}
		return nil, err
	}
	out := make([]handlers.Tensor, len(m.outIdx))
	for i, k := range m.outIdx {
		v := res[k]
		dt, ok := dtypeOf[v.Type]
		if !ok {
			return nil, fmt.Errorf("output %q is of type %s, which torchd does not serve", m.outNames[i], v.Type)
		}
		out[i] = handlers.Tensor{DType: dt, Shape: v.Shape, Data: v.Data, Name: m.outNames[i]}
	}
	return out, nil
}

// Close releases the compiled models and their requests, after the inferences in progress end.
func (m *Model) Close() error {
	errs := []error{m.dyn.close(), m.alone.close()}
	for _, p := range m.static {
		errs = append(errs, p.close())
	}
	return errors.Join(errs...)
}

func index(ts []ov.TensorInfo, name string) int {
	for i, t := range ts {
		if t.Name == name {
			return i
		}
	}
	return -1
}

func names(ts []ov.TensorInfo) string {
	var s []string
	for _, t := range ts {
		s = append(s, t.Name)
	}
	return strings.Join(s, ", ")
}

// The element types torchd serves from OpenVINO models: those its tensors have.
var (
	dtypeOf = map[ov.ElemType]torch.DType{
		ov.Float32: torch.Float32, ov.Float16: torch.Float16, ov.BFloat16: torch.BFloat16,
		ov.Float64: torch.Float64, ov.Int64: torch.Int64, ov.Int32: torch.Int32, ov.Int16: torch.Int16,
		ov.Uint8: torch.Uint8, ov.Int8: torch.Int8, ov.Bool: torch.Bool,
	}
	elemOf = func() map[torch.DType]ov.ElemType {
		m := map[torch.DType]ov.ElemType{}
		for e, d := range dtypeOf {
			m[d] = e
		}
		return m
	}()
)
