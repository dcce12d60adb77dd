package triton

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/proto/inference"
)

// dtypes maps Triton's config types to archive's dtype names. The others (UINT16/32/64,
// INT16, STRING) have no tensor type in torchd's LibTorch binding, and are refused.
var dtypes = map[inference.DataType]string{
	inference.DataType_TYPE_BOOL: "bool", inference.DataType_TYPE_UINT8: "uint8", inference.DataType_TYPE_INT8: "int8",
	inference.DataType_TYPE_INT32: "int32", inference.DataType_TYPE_INT64: "int64",
	inference.DataType_TYPE_FP16: "float16", inference.DataType_TYPE_BF16: "bfloat16",
	inference.DataType_TYPE_FP32: "float32", inference.DataType_TYPE_FP64: "float64",
	inference.DataType_TYPE_STRING: "string", inference.DataType_TYPE_INT16: "int16",
}

// DataType is the config data type of archive's dtype name (TYPE_INVALID for none).
func DataType(dtype string) inference.DataType {
	for t, s := range dtypes {
		if s == dtype {
			return t
		}
	}
	return inference.DataType_TYPE_INVALID
}

// DType returns archive's dtype name for a config data type.
func DType(t inference.DataType) (string, error) {
	if s, ok := dtypes[t]; ok {
		return s, nil
	}
	if t == inference.DataType_TYPE_INVALID {
		return "", errors.New("data_type is not set")
	}
	return "", fmt.Errorf("%w: data_type %s has no tensor type in torchd (it serves BOOL, UINT8, INT8, INT32, INT64, FP16, BF16, FP32, FP64 and, outside LibTorch, STRING)", ErrUnsupported, t)
}

// The PyTorch backend's parameters, and what torchd does with each.
const (
	ParamInferenceMode      = "INFERENCE_MODE"
	ParamDisableOptimized   = "DISABLE_OPTIMIZED_EXECUTION"
	ParamJITProfiling       = "ENABLE_JIT_PROFILING"
	ParamIntraOpThreadCount = "INTRA_OP_THREAD_COUNT"
	ParamInterOpThreadCount = "INTER_OP_THREAD_COUNT"
)

// Settings maps the config onto archive's per-model settings:
//   - max_batch_size, with dynamic_batching, is the batch size (without dynamic_batching
//     Triton runs each request alone: batch size 1); max_queue_delay_microseconds is the
//     batch delay (default 0), preferred_batch_size the batcher's preferred sizes; default_queue_policy's max_queue_size is job_queue_size and
//     default_timeout_microseconds the response timeout;
//   - instance_group count is the workers, kind the device (KIND_GPU: "cuda", gpus the
//     device ids);
//   - INTRA_OP_THREAD_COUNT is the threads per worker;
//   - inputs and outputs keep their names; their shapes are [-1]+dims when max_batch_size
//     > 0, else dims.
func (m *Model) Settings() (archive.ModelConfig, error) {
	s, _, err := m.settings()
	return s, err
}

func (m *Model) settings() (archive.ModelConfig, []string, error) {
	c := m.Config
	var warn []string
	s := archive.ModelConfig{File: ConfigFile, Handler: "tensor"}
	s.BatchSize, s.MaxBatchDelay = archive.Fixed(1), archive.Fixed(time.Duration(0))
	batching := c.MaxBatchSize > 0
	if db := c.GetDynamicBatching(); db != nil {
		if batching {
			s.BatchSize = archive.Fixed(int(c.MaxBatchSize))
		}
		s.MaxBatchDelay = archive.Fixed(time.Duration(db.MaxQueueDelayMicroseconds) * time.Microsecond)
		if db.PriorityLevels > 1 || len(db.PriorityQueuePolicy) > 0 {
			return s, nil, fmt.Errorf("%w: dynamic_batching priority_levels %d: torchd has one priority level per model", ErrUnsupported, db.PriorityLevels)
		}
		for _, p := range db.PreferredBatchSize {
			if p < 1 || !batching || p > c.MaxBatchSize {
				return s, nil, fmt.Errorf("dynamic_batching preferred_batch_size %v: each size must be from 1 to max_batch_size (%d)", db.PreferredBatchSize, c.MaxBatchSize)
			}
			s.PreferredBatchSize = append(s.PreferredBatchSize, int(p))
		}
		if q := db.DefaultQueuePolicy; q != nil {
			if q.TimeoutAction == inference.ModelQueuePolicy_DELAY {
				return s, nil, fmt.Errorf("%w: default_queue_policy timeout_action DELAY; torchd rejects a request whose timeout passed (REJECT)", ErrUnsupported)
			}
			s.JobQueueSize = archive.NonZero(int(q.MaxQueueSize)) // 0 (Triton: unbounded) leaves torchd's bound
			s.ResponseTimeout = archive.NonZero(time.Duration(q.DefaultTimeoutMicroseconds) * time.Microsecond)
		}
	} else if batching {
		warn = append(warn, "max_batch_size > 0 without dynamic_batching: each request runs alone, as in Triton")
	}
	if es := c.GetEnsembleScheduling(); es != nil {
		// An ensemble runs in the request's goroutine through its steps' queues; its one
		// worker only makes it ready.
		s.Runtime = RuntimeEnsemble
		s.MinWorkers, s.MaxWorkers = archive.Fixed(1), archive.Of(1)
		for _, st := range es.Step {
			step := archive.EnsembleStep{Model: st.ModelName, Inputs: st.InputMap, Outputs: st.OutputMap}
			if st.ModelVersion > 0 {
				step.Version = strconv.FormatInt(st.ModelVersion, 10)
			}
			s.Ensemble = append(s.Ensemble, step)
		}
	} else if err := m.instances(&s); err != nil {
		return s, nil, err
	}
	parameters := m.parameters
	switch {
	case IsONNX(c):
		s.Runtime, parameters = RuntimeONNX, m.onnxParameters
	case c.Backend == BackendPython:
		s.Runtime, parameters = RuntimePython, m.pythonParameters
	case IsOpenVINO(c):
		s.Runtime, parameters = RuntimeOpenVINO, m.openvinoParameters
	}
	w, err := parameters(&s)
	if err != nil {
		return s, nil, err
	}
	warn = append(warn, w...)
	for _, in := range c.Input {
		spec, err := tensorSpec("input", in.Name, in.DataType, in.Dims, in.Reshape, batching)
		if err != nil {
			return s, nil, err
		}
		if in.IsShapeTensor || in.AllowRaggedBatch || in.Optional {
			return s, nil, fmt.Errorf("%w: input %q: shape tensors, ragged batches and optional inputs", ErrUnsupported, in.Name)
		}
		s.Inputs = append(s.Inputs, spec)
	}
	for _, out := range c.Output {
		spec, err := tensorSpec("output", out.Name, out.DataType, out.Dims, out.Reshape, batching)
		if err != nil {
			return s, nil, err
		}
		s.Outputs = append(s.Outputs, spec)
	}
	if err := uniqueNames(s.Inputs, "input"); err != nil {
		return s, nil, err
	}
	if err := uniqueNames(s.Outputs, "output"); err != nil {
		return s, nil, err
	}
	order, err := OutputOrder(s.Outputs)
	if err != nil {
		return s, nil, err
	}
	s.Outputs = permute(s.Outputs, order)
	return s, warn, nil
}

func uniqueNames(specs []archive.TensorSpec, kind string) error {
	seen := map[string]bool{}
	for _, t := range specs {
		if seen[t.Name] {
			return fmt.Errorf("%s %q is declared twice", kind, t.Name)
		}
		seen[t.Name] = true
	}
	return nil
}

func tensorSpec(kind, name string, dt inference.DataType, dims []int64, reshape *inference.ModelTensorReshape, batching bool) (archive.TensorSpec, error) {
	if name == "" {
		return archive.TensorSpec{}, fmt.Errorf("an %s has no name", kind)
	}
	dtype, err := DType(dt)
	if err != nil {
		return archive.TensorSpec{}, fmt.Errorf("%s %q: %w", kind, name, err)
	}
	for _, d := range dims {
		if d < -1 {
			return archive.TensorSpec{}, fmt.Errorf("%s %q: dims %v: a dimension is a size ≥ 0 or -1 (variable)", kind, name, dims)
		}
	}
	spec := archive.TensorSpec{Name: name, DType: dtype, Shape: slices.Clone(dims)}
	if _, err := spec.SampleBytes(); err != nil {
		return archive.TensorSpec{}, fmt.Errorf("%s %q: %w", kind, name, err)
	}
	if batching {
		spec.Shape = append([]int64{-1}, dims...)
	}
	if reshape != nil {
		if err := checkReshape(dims, reshape.Shape); err != nil {
			return archive.TensorSpec{}, fmt.Errorf("%s %q: %w", kind, name, err)
		}
		spec.Reshape = slices.Clone(reshape.Shape)
		if spec.Reshape == nil {
			spec.Reshape = []int64{} // a reshape to a scalar
		}
	}
	if len(spec.Shape) == 0 {
		return archive.TensorSpec{}, fmt.Errorf("%s %q: no dims and max_batch_size 0: torchd needs a tensor of rank ≥ 1", kind, name)
	}
	return spec, nil
}

// checkReshape checks that dims and shape hold the same number of elements, and agree on
// variable dimensions (Triton's rule: as many -1 in each).
func checkReshape(dims, shape []int64) error {
	count := func(s []int64) (n int64, vars int) {
		n = 1
		for _, d := range s {
			if d < 0 {
				vars++
				continue
			}
			n *= d
		}
		return n, vars
	}
	a, va := count(dims)
	b, vb := count(shape)
	if va != vb || va == 0 && a != b {
		return fmt.Errorf("reshape %v does not hold the %d elements of dims %v", shape, a, dims)
	}
	return nil
}

// instances maps instance_group onto workers and the device.
func (m *Model) instances(s *archive.ModelConfig) error {
	var kind inference.ModelInstanceGroup_Kind
	workers := 0
	for i, g := range m.Config.InstanceGroup {
		if i > 0 && g.Kind != kind {
			return fmt.Errorf("%w: instance groups of different kinds (%s and %s); torchd runs a model's workers on one kind of device", ErrUnsupported, kind, g.Kind)
		}
		kind = g.Kind
		if g.Count < 0 {
			return fmt.Errorf("instance_group count must be ≥ 0, got %d", g.Count)
		}
		n := int(g.Count)
		if n == 0 {
			n = 1 // Triton's default count
		}
		workers += n
		for _, id := range g.Gpus {
			if !slices.Contains(s.DeviceIDs, int(id)) {
				s.DeviceIDs = append(s.DeviceIDs, int(id))
			}
		}
		if len(g.Profile) > 0 || g.Passive || g.HostPolicy != "" || len(g.SecondaryDevices) > 0 || g.RateLimiter != nil {
			return fmt.Errorf("%w: instance_group %q: profile, passive, host_policy, secondary_devices and rate_limiter", ErrUnsupported, g.Name)
		}
	}
	if workers > 0 {
		s.MinWorkers, s.MaxWorkers = archive.Fixed(workers), archive.Of(workers)
	}
	switch kind {
	case inference.ModelInstanceGroup_KIND_GPU:
		s.Device = archive.Of("cuda")
		if len(s.DeviceIDs) == 1 {
			s.Device = archive.Of("cuda:" + strconv.Itoa(s.DeviceIDs[0]))
		}
	case inference.ModelInstanceGroup_KIND_CPU:
		s.Device = archive.Of("cpu")
	case inference.ModelInstanceGroup_KIND_MODEL:
		return fmt.Errorf("%w: instance_group kind KIND_MODEL (the model places itself on devices); use KIND_CPU or KIND_GPU", ErrUnsupported)
	}
	// KIND_AUTO (or no group): the daemon's device, as Triton picks a GPU when there is one.
	return nil
}

// The ONNX Runtime backend's parameters that torchd honours, and the runtime options they
// become (archive.ModelConfig.RuntimeOptions, read by the onnx backend).
const (
	ParamORTIntraOp       = "intra_op_thread_count"
	ParamORTInterOp       = "inter_op_thread_count"
	ParamORTExecutionMode = "execution_mode"
	ParamORTMemArena      = "enable_mem_arena"
	ParamORTMemPattern    = "enable_mem_pattern"
	// OptionGraphLevel is the runtime option of optimization { graph { level } }.
	OptionGraphLevel = "graph_optimization_level"
)

// onnxParameters reads the ONNX Runtime backend's parameters and graph optimization level.
func (m *Model) onnxParameters(s *archive.ModelConfig) ([]string, error) {
	var warn []string
	s.RuntimeOptions = map[string]string{}
	if g := m.Config.GetOptimization().GetGraph(); g != nil {
		// Triton's ONNX Runtime backend: -1 basic, 1 extended, 2 disable, anything else all.
		level := "all"
		switch g.Level {
		case -1:
			level = "basic"
		case 1:
			level = "extended"
		case 2:
			level = "disable"
		}
		s.RuntimeOptions[OptionGraphLevel] = level
	}
	keys := make([]string, 0, len(m.Config.Parameters))
	for k := range m.Config.Parameters {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v := strings.TrimSpace(m.Config.Parameters[k].GetStringValue())
		switch k {
		case ParamORTIntraOp, ParamORTInterOp:
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 || n > 1024 {
				return nil, fmt.Errorf("parameters %s: want a count from 0 to 1024, got %q", k, v)
			}
			if k == ParamORTIntraOp {
				s.Threads = archive.NonZero(n) // 0: torchd's share of the cores
			} else {
				s.RuntimeOptions[k] = strconv.Itoa(n)
			}
		case ParamORTExecutionMode:
			if v != "0" && v != "1" {
				return nil, fmt.Errorf("parameters %s: want 0 (sequential) or 1 (parallel), got %q", k, v)
			}
			s.RuntimeOptions[k] = v
		case ParamORTMemArena, ParamORTMemPattern:
			b, err := strconv.ParseBool(v)
			if err != nil {
				return nil, fmt.Errorf("parameters %s: want true or false, got %q", k, v)
			}
			s.RuntimeOptions[k] = strconv.FormatBool(b)
		default:
			warn = append(warn, fmt.Sprintf("parameter %s is not read by torchd's ONNX Runtime backend", k))
		}
	}
	return warn, nil
}

// parameters reads the PyTorch backend's parameters. A value that is not a boolean or a
// count is an error; what torchd cannot honour is a warning.
func (m *Model) parameters(s *archive.ModelConfig) ([]string, error) {
	var warn []string
	keys := make([]string, 0, len(m.Config.Parameters))
	for k := range m.Config.Parameters {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v := strings.TrimSpace(m.Config.Parameters[k].GetStringValue())
		switch k {
		case ParamInferenceMode, ParamDisableOptimized, ParamJITProfiling:
			b, err := strconv.ParseBool(v)
			if err != nil {
				return nil, fmt.Errorf("parameters %s: want true or false, got %q", k, v)
			}
			switch {
			case k == ParamInferenceMode && !b:
				warn = append(warn, "INFERENCE_MODE false is not honoured: torchd runs every forward under InferenceMode")
			case k == ParamDisableOptimized && b:
				warn = append(warn, "DISABLE_OPTIMIZED_EXECUTION true is not honoured: TorchScript runs with LibTorch's default executor")
			case k == ParamJITProfiling:
				warn = append(warn, "ENABLE_JIT_PROFILING is not honoured: TorchScript's profiling executor is LibTorch's default, and torchd's warm-up runs each worker three times to let it settle")
			}
		case ParamIntraOpThreadCount, ParamInterOpThreadCount:
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return nil, fmt.Errorf("parameters %s: want a count ≥ 0, got %q", k, v)
			}
			if k == ParamIntraOpThreadCount {
				s.Threads = archive.NonZero(n) // 0: torchd's default
			} else {
				s.InteropThreads = n
			}
		default:
			warn = append(warn, fmt.Sprintf("parameter %s is not read by torchd", k))
		}
	}
	return warn, nil
}

// OutputOrder returns, for each model output position, the declared output it is: the
// PyTorch backend's rule is <name>__<index> when every output name follows it, else the
// config's order.
func OutputOrder(outs []archive.TensorSpec) ([]int, error) {
	names := make([]string, len(outs))
	for i, o := range outs {
		names[i] = o.Name
	}
	idx, ok := namedIndexes(names)
	if !ok {
		return identity(len(outs)), nil
	}
	return positions(idx, "output")
}

// InputOrder returns, for each forward argument position, the declared input it takes, by
// the PyTorch backend's rule: when every input is named after one of forward's arguments,
// by argument name; else when every name is <name>__<index>, by index; else in the
// config's order. args are forward's argument names (self excluded).
func InputOrder(ins []archive.TensorSpec, args []string) ([]int, error) {
	if len(args) != len(ins) {
		return nil, fmt.Errorf("the config declares %d inputs, the model's forward takes %d (%s)", len(ins), len(args), strings.Join(args, ", "))
	}
	names := make([]string, len(ins))
	byArg := make([]int, len(ins))
	all := true
	for i, in := range ins {
		names[i] = in.Name
		j := slices.Index(args, in.Name)
		if j < 0 {
			all = false
		}
		byArg[i] = j
	}
	if all {
		return positions(byArg, "input")
	}
	if idx, ok := namedIndexes(names); ok {
		return positions(idx, "input")
	}
	return identity(len(ins)), nil
}

// namedIndexes reads <name>__<index> names, as the backend does: after the first "__",
// digits only.
func namedIndexes(names []string) ([]int, bool) {
	out := make([]int, len(names))
	for i, n := range names {
		_, after, ok := strings.Cut(n, "__")
		if !ok {
			return nil, false
		}
		v, err := strconv.Atoi(after)
		if err != nil || v < 0 {
			return nil, false
		}
		out[i] = v
	}
	return out, true
}

// positions turns "declared i goes to position idx[i]" into "position p takes declared
// order[p]", requiring the positions 0..n-1 each once.
func positions(idx []int, kind string) ([]int, error) {
	order := make([]int, len(idx))
	for i := range order {
		order[i] = -1
	}
	for i, p := range idx {
		if p >= len(idx) || order[p] >= 0 {
			return nil, fmt.Errorf("%s indexes %v do not number the %d %ss 0 to %d once each", kind, idx, len(idx), kind, len(idx)-1)
		}
		order[p] = i
	}
	return order, nil
}

func identity(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

func permute(specs []archive.TensorSpec, order []int) []archive.TensorSpec {
	out := make([]archive.TensorSpec, len(order))
	for p, i := range order {
		out[p] = specs[i]
	}
	return out
}

// Permute returns specs in the order InputOrder or OutputOrder returned.
func Permute(specs []archive.TensorSpec, order []int) []archive.TensorSpec {
	return permute(specs, order)
}
