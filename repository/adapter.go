// Package repository is what a version served from a Triton model repository adds to the
// common load and request path: the Adapter of its config.pbtxt (input order, reshapes,
// warm-up, labels), which the front-ends read back with AdapterOf. Which versions are
// loaded, reloaded and unloaded is package lifecycle's. It knows no protocol: its errors are
// core's kinds.
package repository

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/archive/triton"
	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/handlers"
	"github.com/torchd/torchd/proto/inference"
	"github.com/torchd/torchd/torch"
)

// NewAdapter is the adapter a version of m is loaded with.
func NewAdapter(m *triton.Model) *Adapter {
	return &Adapter{config: m.Config, dir: m.Dir(), batch: m.Config.MaxBatchSize > 0}
}

// AdapterOf returns the adapter a version was loaded with from a Triton repository, or nil
// for a version loaded otherwise.
func AdapterOf(v *core.ModelVersion) *Adapter {
	t, _ := v.Adapter().(*Adapter)
	return t
}

// Batched reports whether the model's tensors lead with the batch dimension
// (max_batch_size > 0).
func (t *Adapter) Batched() bool { return t.batch }

// Labels are the class labels of an output from its label_filename; nil: none.
func (t *Adapter) Labels(output string) map[int]string { return t.labels[output] }

// Adapter is what a version served from a Triton model repository adds to the common
// load and request path (core.Adapter): its config, the order of its inputs, its reshapes,
// its warm-up and its outputs' labels. The front-ends read it back with AdapterOf.
type Adapter struct {
	config *inference.ModelConfig
	dir    string // the model directory, where model_warmup's input_data_file lives
	ins    []archive.TensorSpec
	outs   []archive.TensorSpec
	batch  bool // max_batch_size > 0: tensors lead with the batch dimension
	// labels are the outputs' label_filename files by output name, for classification.
	labels map[string]map[int]string
}

// Platform is what the v2 metadata reports: the config's platform, or pytorch_libtorch for
// a config that names only the pytorch backend, as Triton fills it in.
func (t *Adapter) Platform() string {
	if t.config.Platform != "" {
		return t.config.Platform
	}
	if t.config.Backend == triton.BackendPython || t.config.Backend == triton.BackendOpenVINO {
		return t.config.Backend // a backend with no platform: its name, not PyTorch's
	}
	return triton.PlatformLibTorch
}

// Check refuses a KIND_GPU instance group on a torchd without a GPU, before the load.
func (t *Adapter) Check(s core.ModelSettings) error {
	if strings.HasPrefix(s.Device, "cuda") && !torch.CUDAAvailable() {
		return errors.New("instance_group kind KIND_GPU, but this torchd has no GPU (a CPU build, or no CUDA device): use KIND_CPU")
	}
	return nil
}

// Prepare checks the loaded model against the config and puts the declared inputs in the
// order forward takes them, by the PyTorch backend's naming rule.
func (t *Adapter) Prepare(am *archive.Model, cm core.Model) error {
	var m torch.Model
	if tm, ok := cm.(interface{ Torch() torch.Model }); ok {
		m = tm.Torch()
	}
	if m == nil {
		// Another runtime (ONNX Runtime) feeds inputs by name and reports its graph's own
		// signature: the config is checked against it, or completed from it.
		sg, ok := cm.(core.Signed)
		if !ok {
			return fmt.Errorf("%w: the %s runtime cannot serve a Triton repository model", triton.ErrUnsupported, cm.Kind())
		}
		ins, outs := sg.Signature()
		if err := t.complete(am, ins, outs); err != nil {
			return err
		}
	}
	if p, ok := m.(*torch.Package); ok {
		var args []string
		for _, s := range p.Inputs() {
			args = append(args, s.Name)
		}
		order, err := triton.InputOrder(am.Config.Inputs, args)
		if err != nil {
			return err
		}
		am.Config.Inputs = triton.Permute(am.Config.Inputs, order)
		for i, s := range p.Inputs() {
			if err := t.matches(am.Config.Inputs[i], s); err != nil {
				return err
			}
		}
	} else if mod, ok := m.(*torch.Module); ok {
		args, err := forwardArgs(mod)
		if err != nil {
			return err
		}
		order, err := triton.InputOrder(am.Config.Inputs, args)
		if err != nil {
			return err
		}
		am.Config.Inputs = triton.Permute(am.Config.Inputs, order)
	}
	t.ins, t.outs = am.Config.Inputs, am.Config.Outputs
	for _, o := range t.config.Output {
		if o.LabelFilename == "" {
			continue
		}
		labels, err := readLabelFile(t.dir, o.LabelFilename)
		if err != nil {
			return fmt.Errorf("output %q: %w", o.Name, err)
		}
		if t.labels == nil {
			t.labels = map[string]map[int]string{}
		}
		t.labels[o.Name] = labels
	}
	return nil
}

// complete checks the config's inputs and outputs against a graph's own (by name, type and
// rank; fixed sizes must agree) or, where the config declares none, fills them in from it, as
// Triton's ONNX Runtime backend auto-completes a config.
func (t *Adapter) complete(am *archive.Model, ins, outs []archive.TensorSpec) error {
	batched := func(s archive.TensorSpec) archive.TensorSpec {
		if t.batch && len(s.Shape) > 0 {
			s.Shape = append([]int64{-1}, s.Shape[1:]...)
		}
		return s
	}
	fill := func(kind string, declared *[]archive.TensorSpec, graph []archive.TensorSpec, proto *[]*inference.ModelInput, protoOut *[]*inference.ModelOutput) error {
		if len(*declared) == 0 {
			for _, g := range graph {
				if t.batch && (len(g.Shape) == 0 || g.Shape[0] > 0) {
					return fmt.Errorf("%s %q of the model has shape %v, without a variable batch dimension first; max_batch_size %d needs one (set max_batch_size: 0)", kind, g.Name, g.Shape, t.config.MaxBatchSize)
				}
				g = batched(g)
				*declared = append(*declared, g)
				dims := g.Shape
				if t.batch {
					dims = dims[1:]
				}
				dt := triton.DataType(g.DType)
				if proto != nil {
					*proto = append(*proto, &inference.ModelInput{Name: g.Name, DataType: dt, Dims: slices.Clone(dims)})
				} else {
					*protoOut = append(*protoOut, &inference.ModelOutput{Name: g.Name, DataType: dt, Dims: slices.Clone(dims)})
				}
			}
			return nil
		}
		for _, d := range *declared {
			i := slices.IndexFunc(graph, func(g archive.TensorSpec) bool { return g.Name == d.Name })
			if i < 0 {
				var names []string
				for _, g := range graph {
					names = append(names, g.Name)
				}
				return fmt.Errorf("%s %q is not an %s of the model (it has %s)", kind, d.Name, kind, strings.Join(names, ", "))
			}
			g := graph[i]
			shape := t.modelShape(d)
			if d.DType != g.DType || len(shape) != len(g.Shape) {
				return fmt.Errorf("%s %q: the config declares %s %v, the model takes %s %v", kind, d.Name, d.DType, shape, g.DType, g.Shape)
			}
			for j := range shape {
				if shape[j] >= 0 && g.Shape[j] >= 0 && shape[j] != g.Shape[j] {
					return fmt.Errorf("%s %q: the config declares shape %v, the model takes %v", kind, d.Name, shape, g.Shape)
				}
			}
		}
		return nil
	}
	if err := fill("input", &am.Config.Inputs, ins, &t.config.Input, nil); err != nil {
		return err
	}
	return fill("output", &am.Config.Outputs, outs, nil, &t.config.Output)
}

// matches checks a declared input against an AOTInductor package's recorded spec: the same
// dtype and rank, and the same size wherever both fix one.
func (t *Adapter) matches(in archive.TensorSpec, s torch.Spec) error {
	shape := t.modelShape(in)
	if in.DType != s.DType || len(shape) != len(s.Shape) {
		return fmt.Errorf("input %q: the config declares %s %v, the package was exported for %s %v", in.Name, in.DType, shape, s.DType, s.Shape)
	}
	for i := range shape {
		if shape[i] >= 0 && s.Shape[i] >= 0 && shape[i] != s.Shape[i] {
			return fmt.Errorf("input %q: the config declares shape %v, the package was exported for %v", in.Name, shape, s.Shape)
		}
	}
	return nil
}

// modelShape is the shape the model takes for a declared tensor: its reshape (after the
// batch dimension when batching), else its shape.
func (t *Adapter) modelShape(s archive.TensorSpec) []int64 {
	if s.Reshape == nil {
		return s.Shape
	}
	if t.batch {
		return append([]int64{-1}, s.Reshape...)
	}
	return s.Reshape
}

// forwardArgs returns the names of forward's arguments after self. A Dict(str, Tensor)
// input, which the backend feeds by name, is refused.
func forwardArgs(mod *torch.Module) ([]string, error) {
	args, err := mod.Args("forward")
	if err != nil {
		return nil, err
	}
	var names []string
	for _, a := range args {
		if strings.HasPrefix(a.Type, "Dict(") {
			return nil, fmt.Errorf("%w: forward takes %s %s; torchd feeds forward positional tensors (a dict input is fed by key in Triton)", triton.ErrUnsupported, a.Type, a.Name)
		}
		names = append(names, a.Name)
	}
	return names, nil
}

// ToModel refuses a request larger than max_batch_size, as Triton does, and reshapes its
// tensors from their declared shapes to the model's.
func (t *Adapter) ToModel(s *handlers.Sample) error {
	if t.batch && s.Items > int(t.config.MaxBatchSize) {
		return fmt.Errorf("inference request batch-size must be <= %d for '%s', got %d", t.config.MaxBatchSize, t.config.Name, s.Items)
	}
	for i := range s.Tensors {
		if i >= len(t.ins) || t.ins[i].Reshape == nil {
			continue
		}
		shape, err := t.reshape(s.Tensors[i], t.ins[i].Reshape, s.Items)
		if err != nil {
			return fmt.Errorf("input %q: %w", t.ins[i].Name, err)
		}
		s.Tensors[i].Shape = shape
		if i == 0 && !t.batch {
			s.Items = int(shape[0])
		}
	}
	return nil
}

// FromModel reshapes a result's tensors from the model's shapes to the declared ones.
func (t *Adapter) FromModel(out []handlers.Tensor, items int) error {
	for i := range out {
		if i >= len(t.outs) || t.outs[i].Reshape == nil {
			continue
		}
		dims := t.outs[i].Shape
		if t.batch {
			dims = dims[1:]
		}
		shape, err := t.reshape(out[i], dims, items)
		if err != nil {
			return fmt.Errorf("output %q: %w", t.outs[i].Name, err)
		}
		out[i].Shape = shape
	}
	return nil
}

// reshape gives x the shape to (after the batch dimension when batching); one -1 in to
// takes the elements left.
func (t *Adapter) reshape(x handlers.Tensor, to []int64, items int) ([]int64, error) {
	shape := slices.Clone(to)
	if t.batch {
		shape = append([]int64{int64(items)}, to...)
	}
	n, known, free := x.Numel(), int64(1), -1
	for i, d := range shape {
		if d < 0 {
			if free >= 0 {
				return nil, fmt.Errorf("reshape %v has two variable dimensions", to)
			}
			free = i
			continue
		}
		known *= d
	}
	if free >= 0 && known > 0 && n%known == 0 {
		shape[free] = n / known
		known = n
	}
	if known != n || len(shape) == 0 {
		return nil, fmt.Errorf("a tensor of shape %v cannot be reshaped to %v", x.Shape, to)
	}
	return shape, nil
}

// maxWarmupRuns bounds a repository model's warm-up runs, all its model_warmup entries
// together: a count of 4 billion would be 32 GB of slots before the first forward.
const maxWarmupRuns = 1 << 16

// Warmup returns the samples each worker runs before serving: the config's model_warmup
// (zero_data, random_data, or input_data_file from the model's warmup/ directory, count
// times each), else zeros of the declared inputs at batch 1, three times.
func (t *Adapter) Warmup() ([]*handlers.Sample, error) {
	if len(t.config.ModelWarmup) == 0 {
		s := &handlers.Sample{Items: 1}
		for _, in := range t.ins {
			shape := slices.Clone(t.modelShape(in))
			for i, d := range shape {
				if d < 0 {
					shape[i] = 1
				}
			}
			x, err := zeros(in.DType, shape)
			if err != nil {
				return nil, err
			}
			s.Tensors = append(s.Tensors, x)
		}
		if !t.batch {
			s.Items = int(s.Tensors[0].Shape[0])
		}
		return []*handlers.Sample{s, s, s}, nil
	}
	var out []*handlers.Sample
	runs := 0
	for _, w := range t.config.ModelWarmup {
		// count is a uint32: each run is a slot here, and a forward per worker.
		if runs += int(max(w.Count, 1)); runs > maxWarmupRuns {
			return nil, fmt.Errorf("model_warmup %q: count %d makes more than the %d warm-up runs torchd does", w.Name, w.Count, maxWarmupRuns)
		}
		s, err := t.warmupSample(w)
		if err != nil {
			return nil, fmt.Errorf("model_warmup %q: %w", w.Name, err)
		}
		for range max(w.Count, 1) {
			out = append(out, s)
		}
	}
	return out, nil
}

func (t *Adapter) warmupSample(w *inference.ModelWarmup) (*handlers.Sample, error) {
	items := int(max(w.BatchSize, 1))
	if t.batch && items > int(t.config.MaxBatchSize) {
		return nil, fmt.Errorf("batch_size %d is above max_batch_size %d", w.BatchSize, t.config.MaxBatchSize)
	}
	s := &handlers.Sample{Items: items}
	for _, in := range t.ins {
		wi, ok := w.Inputs[in.Name]
		if !ok {
			return nil, fmt.Errorf("no data for input %q", in.Name)
		}
		dt, err := triton.DType(wi.DataType)
		if err != nil {
			return nil, err
		}
		if dt != in.DType {
			return nil, fmt.Errorf("input %q is %s, the warm-up gives %s", in.Name, in.DType, dt)
		}
		shape := slices.Clone(wi.Dims)
		if t.batch {
			shape = append([]int64{int64(items)}, shape...)
		}
		x, err := zeros(dt, shape)
		if err != nil {
			return nil, err
		}
		switch src := wi.InputDataType.(type) {
		case *inference.ModelWarmup_Input_RandomData:
			fillRandom(x)
		case *inference.ModelWarmup_Input_InputDataFile:
			// Triton reads it from the model directory's warmup/; one copy per batch item.
			p := filepath.Join(t.dir, "warmup", src.InputDataFile)
			if filepath.Base(src.InputDataFile) != src.InputDataFile {
				return nil, fmt.Errorf("input_data_file %q must be a file name in warmup/", src.InputDataFile)
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return nil, err
			}
			row := len(x.Data) / max(items, 1)
			if !t.batch {
				row = len(x.Data)
			}
			if len(b) != row {
				return nil, fmt.Errorf("input_data_file %s has %d bytes, input %q needs %d", src.InputDataFile, len(b), in.Name, row)
			}
			for off := 0; off < len(x.Data); off += row {
				copy(x.Data[off:], b)
			}
		}
		s.Tensors = append(s.Tensors, x)
	}
	if err := t.ToModel(s); err != nil {
		return nil, err
	}
	if !t.batch {
		s.Items = int(s.Tensors[0].Shape[0])
	}
	return s, nil
}

func zeros(dtype string, shape []int64) (handlers.Tensor, error) {
	dt, err := torch.ParseDType(dtype)
	if err != nil {
		return handlers.Tensor{}, err
	}
	for _, d := range shape {
		if d < 0 {
			return handlers.Tensor{}, fmt.Errorf("dims %v have a variable dimension: give the warm-up's size", shape)
		}
	}
	// A string element of zeros is an empty string: its 4-byte length, 0.
	n, err := archive.SampleBytes(shape, int64(max(dt.Size(), 4*btoi(dt == torch.Bytes))))
	if err != nil {
		return handlers.Tensor{}, err
	}
	return handlers.Tensor{DType: dt, Shape: shape, Data: make([]byte, n)}, nil
}

// fillRandom fills x with values in [0, 1) for floats, and 0 or 1 for integers and bools,
// which every model takes (a random bit pattern would be NaNs and out-of-range indices).
func fillRandom(x handlers.Tensor) {
	size := x.DType.Size()
	if size == 0 {
		return // strings stay empty
	}
	for off := 0; off+size <= len(x.Data); off += size {
		f := rand.Float64()
		switch x.DType {
		case torch.Float32:
			binary.LittleEndian.PutUint32(x.Data[off:], math.Float32bits(float32(f)))
		case torch.Float64:
			binary.LittleEndian.PutUint64(x.Data[off:], math.Float64bits(f))
		case torch.Float16, torch.BFloat16:
			x.Data[off], x.Data[off+1] = 0, 0x3c // 1.0 in float16; a small positive in bfloat16
		default:
			x.Data[off] = byte(rand.IntN(2))
		}
	}
}

// readLabelFile reads a Triton label file: one label a line, the line number its class index.
func readLabelFile(dir, name string) (map[int]string, error) {
	if filepath.Base(name) != name {
		return nil, fmt.Errorf("label_filename %q must be a file name in the model's directory", name)
	}
	f, err := os.Open(filepath.Join(dir, name))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("label_filename %q: the model's directory has no such file", name)
	}
	if err != nil {
		return nil, fmt.Errorf("label_filename %q cannot be read", name)
	}
	defer f.Close()
	labels := map[int]string{}
	sc := bufio.NewScanner(f)
	for i := 0; sc.Scan(); i++ {
		labels[i] = sc.Text()
	}
	if sc.Err() != nil {
		return nil, fmt.Errorf("label_filename %q cannot be read", name)
	}
	return labels, nil
}

// effective is the config the version is served with, filled in as Triton fills a config
// in: the version policy, the backend, and the instances torchd runs.
func (t *Adapter) Config(v *core.ModelVersion) *inference.ModelConfig {
	c := proto.Clone(t.config).(*inference.ModelConfig)
	if c.VersionPolicy == nil {
		c.VersionPolicy = &inference.ModelVersionPolicy{PolicyChoice: &inference.ModelVersionPolicy_Latest_{Latest: &inference.ModelVersionPolicy_Latest{NumVersions: 1}}}
	}
	if c.Platform == "" && c.Backend != triton.BackendPython && c.Backend != triton.BackendOpenVINO {
		c.Platform = t.Platform()
		if triton.IsONNX(c) {
			c.Platform = triton.PlatformONNX
		}
	}
	if c.Backend == "" {
		c.Backend = triton.BackendPyTorch
		if triton.IsONNX(c) {
			c.Backend = triton.BackendONNX
		}
	}
	if c.DefaultModelFilename == "" {
		c.DefaultModelFilename = filepath.Base(v.Archive().SerializedFile)
	}
	kind := inference.ModelInstanceGroup_KIND_CPU
	if strings.HasPrefix(v.Model().Device(), "cuda") {
		kind = inference.ModelInstanceGroup_KIND_GPU
	}
	if len(c.InstanceGroup) == 0 {
		c.InstanceGroup = []*inference.ModelInstanceGroup{{Name: c.Name, Kind: kind, Count: int32(v.WorkerCount())}}
	}
	for _, g := range c.InstanceGroup {
		if g.Kind == inference.ModelInstanceGroup_KIND_AUTO {
			g.Kind = kind
		}
	}
	return c
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
