package archive

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

// The example of the package documentation, key for key.
const exampleTOML = `
handler = "image_classifier"
batch_size = 8
max_batch_delay = 5      # ms
min_workers = 1
max_workers = 2
job_queue_size = 100
response_timeout = 120   # s
startup_timeout = 60
device = "cuda"
device_ids = [0, 1]
threads = 1
forward_batch = 4
preferred_batch_size = [4, 8]
freeze = true
precision = "bf16"
fp32_modules = ["stem", "blocks.0"]
[options]                # handler options, validated by the handler
image_size = 224
resize = 256
mean = [0.485, 0.456, 0.406]
std = [0.229, 0.224, 0.225]
top_k = 5
color = "rgb"
[[inputs]]
name = "input__0"
dtype = "float32"
shape = [-1, 3, 224, 224]
[[outputs]]
name = "output__0"
dtype = "float32"
shape = [-1, 1000]
`

func TestParseTOML(t *testing.T) {
	c, err := ParseModelConfig(ConfigTOML, []byte(exampleTOML))
	if err != nil {
		t.Fatal(err)
	}
	want := ModelConfig{
		File: ConfigTOML, Handler: "image_classifier",
		Settings: Settings{
			BatchSize: Fixed(8), MaxBatchDelay: Fixed(5 * time.Millisecond), MinWorkers: Fixed(1), MaxWorkers: Of(2), JobQueueSize: Of(100),
			ResponseTimeout: Of(120 * time.Second), StartupTimeout: Of(60 * time.Second),
			Device: Of("cuda"), Threads: Of(1), ForwardBatch: Fixed(4), Freeze: Of(true), Precision: Of("bf16"),
		},
		DeviceIDs:          []int{0, 1},
		FP32Modules:        []string{"stem", "blocks.0"},
		PreferredBatchSize: []int{4, 8},
		Options: map[string]any{
			"image_size": int64(224), "resize": int64(256),
			"mean": []any{0.485, 0.456, 0.406}, "std": []any{0.229, 0.224, 0.225},
			"top_k": int64(5), "color": "rgb",
		},
		Inputs:  []TensorSpec{{Name: "input__0", DType: "float32", Shape: []int64{-1, 3, 224, 224}}},
		Outputs: []TensorSpec{{Name: "output__0", DType: "float32", Shape: []int64{-1, 1000}}},
	}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("got\n%+v\nwant\n%+v", c, want)
	}

	// An empty file sets nothing, and explicit zero delay differs from unset.
	c, err = ParseModelConfig(ConfigTOML, []byte("max_batch_delay = 0\ninputs = [{name = \"x\", dtype = \"bool\"}]"))
	if err != nil || c.MaxBatchDelay != Fixed(time.Duration(0)) || c.BatchSize.Given() || c.Inputs[0].Shape != nil {
		t.Errorf("got %+v, %v", c, err)
	}
}

// Each bad value is one *ConfigError naming the file, the key and what is allowed.
func TestParseTOMLErrors(t *testing.T) {
	for _, tc := range []struct {
		toml, key, msg string
	}{
		{`batch_size = "8"`, "batch_size", `must be an integer >= 1, got string "8"`},
		{`batch_size = 0`, "batch_size", "must be an integer >= 1, got 0"},
		{`batch_size = 1.5`, "batch_size", "must be an integer >= 1, got float 1.5"},
		{`max_batch_delay = -1`, "max_batch_delay", "must be an integer >= 0, got -1"},
		{`response_timeout = 10000000000`, "response_timeout", "must be an integer <= 1000000000"},
		{"min_workers = 4\nmax_workers = 2", "max_workers", "must be >= min_workers (4), got 2"},
		{`job_queue_size = true`, "job_queue_size", "must be an integer >= 1, got boolean true"},
		{`device = "gpu"`, "device", `must be "cpu", "cuda" or "cuda:N", got "gpu"`},
		{`device = "cuda:01"`, "device", `"cuda:N"`},
		{"device = \"cpu\"\ndevice_ids = [0]", "device_ids", `needs device = "cuda"`},
		{`device_ids = [0, -1]`, "device_ids[1]", "must be one of GPU indexes >= 0, got integer -1"},
		{`threads = -2`, "threads", "must be an integer >= 1, got -2"},
		{`forward_batch = -1`, "forward_batch", "must be an integer >= 0, got -1"},
		{`forward_batch = "half"`, "forward_batch", `must be an integer >= 0, got string "half"`},
		{`preferred_batch_size = 8`, "preferred_batch_size", "must be an array of batch sizes >= 1, got integer 8"},
		{`preferred_batch_size = [4, 0]`, "preferred_batch_size[1]", "must be one of batch sizes >= 1, got integer 0"},
		{`freeze = "yes"`, "freeze", `must be true or false, got string "yes"`},
		{`optimize_for_inference = 1`, "optimize_for_inference", `must be true or false, got`},
		{`precision = "fp8"`, "precision", `must be one of ["fp32" "bf16" "fp16" "int8"] or "auto", got "fp8"`},
		{`precision = 16`, "precision", `must be a string`},
		{`fp32_modules = "fc"`, "fp32_modules", `must be an array of submodule paths, got string "fc"`},
		{`fp32_modules = ["fc", 3]`, "fp32_modules[1]", `must be a submodule path such as "features.0", got integer 3`},
		{`fp32_modules = ["fc,head"]`, "fp32_modules[0]", `got string "fc,head"`},
		{`fp32_modules = [""]`, "fp32_modules[0]", `got string ""`},
		{`handler = 5`, "handler", "must be a string, got integer 5"},
		{`handler = "my_handler.py"`, "handler", "custom Python handler"},
		{`serialized_file = "../model.pt"`, "serialized_file", `path has a ".." component`},
		{`serialized_file = "model.tflite"`, "serialized_file", "not a model file torchd loads"},
		{`options = 3`, "options", "must be a table ([options]), got integer 3"},
		{`inputs = 3`, "inputs", "must be an array of tables ([[inputs]])"},
		{`inputs = [3]`, "inputs[0]", "must be a table with name, dtype and shape"},
		{"[[inputs]]\ndtype = \"float32\"", "inputs[0].name", "required"},
		{"[[inputs]]\nname = \"x\"", "inputs[0].dtype", "required: one of float32,"},
		{"[[outputs]]\nname = \"x\"\ndtype = \"float\"", "outputs[0].dtype", `must be one of float32, float16, bfloat16, float64, int64, int32, int16, int8, uint8, bool, string, got "float"`},
		{"[[inputs]]\nname = \"x\"\ndtype = \"int64\"\nshape = [1, 0]", "inputs[0].shape[1]", "must be -1 (variable) or >= 1, got 0"},
		{"[[inputs]]\nname = \"x\"\ndtype = \"int64\"\nshape = [-2]", "inputs[0].shape[0]", "-1 for variable"},
		{"[[inputs]]\nname = \"x\"\ndtype = \"int64\"\nshape = \"1,2\"", "inputs[0].shape", "must be an array of dimensions"},
		// Each dimension is in range, their product is not: an overflow, and 40 GB.
		{"[[inputs]]\nname = \"x\"\ndtype = \"float32\"\nshape = [-1, 100000, 100000, 100000]", "inputs[0].shape", "holds more than the 1024 MiB a sample may"},
		{"[[inputs]]\nname = \"x\"\ndtype = \"float32\"\nshape = [-1, 10000, 1000, 1000]", "inputs[0].shape", "holds more than the 1024 MiB a sample may"},
		{"[[inputs]]\nname = \"x\"\ndtype = \"int64\"\n[[inputs]]\nname = \"x\"\ndtype = \"int64\"", "inputs[1].name", `"x" is declared twice`},
		{"[[inputs]]\nname = \"x\"\ndtype = \"int64\"\ndims = [1]", "inputs[0].dims", "unknown key; allowed: name, dtype, shape"},
		{`batchSize = 8`, "batchSize", "unknown key; allowed: handler, serialized_file, batch_size"},
		{"batch_size = \n", "batch_size", "invalid TOML on line 1"},
	} {
		_, err := ParseModelConfig(ConfigTOML, []byte(tc.toml))
		var ce *ConfigError
		if !errors.As(err, &ce) || !errors.Is(err, ErrInvalidConfig) || ce.File != ConfigTOML || ce.Key != tc.key || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%q:\n got %v\nwant %s: %s: ...%s...", tc.toml, err, ConfigTOML, tc.key, tc.msg)
		}
	}
}

// All problems are reported at once.
func TestParseTOMLReportsEveryError(t *testing.T) {
	_, err := ParseModelConfig(ConfigTOML, []byte("batch_size = 0\nthreads = \"2\"\nextra = 1\n"))
	for _, key := range []string{"batch_size:", "threads:", "extra:"} {
		if !strings.Contains(err.Error(), ConfigTOML+": "+key) {
			t.Errorf("error lacks %s: %v", key, err)
		}
	}
}

func TestParseYAML(t *testing.T) {
	yaml := `
minWorkers: 2
maxWorkers: 0          # TorchServe ignores 0
batchSize: 4
maxBatchDelay: 0
responseTimeout: 0
startupTimeout: 300
deviceType: GPU
deviceIds: [2, 3]
jobQueueSize: 50
parallelType: tp       # unknown to torchd: the handler's
handler:
  top_k: 3
  mean: [0.5, 0.5, 0.5]
top_k: 7               # top-level wins over handler:
`
	c, err := ParseModelConfig("cfg.yml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	want := ModelConfig{
		File: "cfg.yml",
		Settings: Settings{
			MinWorkers: Fixed(2), BatchSize: Fixed(4), MaxBatchDelay: Fixed(time.Duration(0)), StartupTimeout: Of(300 * time.Second),
			Device: Of("cuda"), JobQueueSize: Of(50),
		},
		DeviceIDs: []int{2, 3},
		Options:   map[string]any{"parallelType": "tp", "top_k": int64(7), "mean": []any{0.5, 0.5, 0.5}},
	}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("got\n%+v\nwant\n%+v", c, want)
	}
	if n, err := c.IntOption("top_k", 5); n != 7 || err != nil {
		t.Errorf("IntOption = %d, %v", n, err)
	}

	for _, tc := range []struct{ yaml, key, msg string }{
		{`batchSize: "8"`, "batchSize", `must be an integer >= 0, got string "8"`},
		{`minWorkers: -1`, "minWorkers", "must be an integer >= 0, got -1"},
		{`deviceType: tpu`, "deviceType", `must be cpu or gpu, got "tpu"`},
		{`deviceIds: 0`, "deviceIds", "must be an array"},
		{"minWorkers: 3\nmaxWorkers: 1", "maxWorkers", "must be >= minWorkers (3), got 1"},
		{`handler: image_classifier`, "handler", "must be a map of handler options"},
		{"a: [", "", "invalid YAML"},
		{"- 1\n- 2", "", "invalid YAML"},
	} {
		_, err := ParseModelConfig(ConfigYAML, []byte(tc.yaml))
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.File != ConfigYAML || ce.Key != tc.key || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%q: got %v, want %s: %s: ...%s...", tc.yaml, err, ConfigYAML, tc.key, tc.msg)
		}
	}
	if _, err := ParseModelConfig("config.json", nil); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("json config: %v", err)
	}
}

func TestOptions(t *testing.T) {
	c, err := ParseModelConfig(ConfigTOML, []byte(`
[options]
top_k = 5
mean = [0, 0.5, 1]
color = "rgb"
center_crop = true
scale = 2
bad_list = [1, "x"]
`))
	if err != nil {
		t.Fatal(err)
	}
	if n, err := c.IntOption("top_k", 1); n != 5 || err != nil {
		t.Errorf("IntOption = %d, %v", n, err)
	}
	if n, err := c.IntOption("missing", 9); n != 9 || err != nil {
		t.Errorf("IntOption default = %d, %v", n, err)
	}
	if f, err := c.FloatsOption("mean", nil); !reflect.DeepEqual(f, []float64{0, 0.5, 1}) || err != nil {
		t.Errorf("FloatsOption = %v, %v", f, err)
	}
	if f, err := c.FloatOption("scale", 1); f != 2 || err != nil {
		t.Errorf("FloatOption = %v, %v", f, err)
	}
	if s, err := c.StringOption("color", ""); s != "rgb" || err != nil {
		t.Errorf("StringOption = %q, %v", s, err)
	}
	if b, err := c.BoolOption("center_crop", false); !b || err != nil {
		t.Errorf("BoolOption = %v, %v", b, err)
	}
	for _, tc := range []struct {
		err      error
		key, msg string
	}{
		{second(c.IntOption("color", 0)), "options.color", `must be an integer, got string "rgb"`},
		{second(c.FloatsOption("bad_list", nil)), "options.bad_list[1]", `must be a number, got string "x"`},
		{second(c.FloatsOption("top_k", nil)), "options.top_k", "must be an array of numbers, got integer 5"},
		{second(c.FloatOption("color", 0)), "options.color", "must be a number"},
		{second(c.StringOption("top_k", "")), "options.top_k", "must be a string, got integer 5"},
		{second(c.BoolOption("top_k", false)), "options.top_k", "must be true or false"},
	} {
		var ce *ConfigError
		if !errors.As(tc.err, &ce) || ce.File != ConfigTOML || ce.Key != tc.key || !strings.Contains(tc.err.Error(), tc.msg) {
			t.Errorf("got %v, want %s ...%s...", tc.err, tc.key, tc.msg)
		}
	}
}

func second[T any](_ T, err error) error { return err }

// forward_batch = 0 is the whole batch, as the server's setting takes it: set, not refused.
func TestForwardBatchZero(t *testing.T) {
	c, err := ParseModelConfig("model-config.toml", []byte("forward_batch = 0\n"))
	if err != nil {
		t.Fatal(err)
	}
	if fb := c.Settings.ForwardBatch; !fb.Set || fb.Auto || fb.V != 0 {
		t.Errorf("forward_batch = 0 parsed as %+v", fb)
	}
	var s Settings
	if err := s.Set("forward_batch", int64(0)); err != nil || !s.ForwardBatch.Set || s.ForwardBatch.V != 0 {
		t.Errorf("Set(forward_batch, 0): %+v, %v", s.ForwardBatch, err)
	}
}
