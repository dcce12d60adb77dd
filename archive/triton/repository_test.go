package triton

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/torchd/torchd/archive"
)

// digitsConfig is a config as Triton users write them for a TorchScript model.
const digitsConfig = `
name: "digits"
platform: "pytorch_libtorch"
max_batch_size: 8
input [
  {
    name: "INPUT__0"
    data_type: TYPE_FP32
    dims: [ 1, 28, 28 ]
  }
]
output [
  {
    name: "OUTPUT__0"
    data_type: TYPE_FP32
    dims: [ 10 ]
  }
]
dynamic_batching {
  preferred_batch_size: [ 4 ]
  max_queue_delay_microseconds: 2000
  default_queue_policy { max_queue_size: 64 default_timeout_microseconds: 500000 }
}
instance_group [ { count: 2 kind: KIND_CPU } ]
parameters: { key: "INTRA_OP_THREAD_COUNT" value: { string_value: "1" } }
parameters: { key: "INTER_OP_THREAD_COUNT" value: { string_value: "1" } }
parameters: { key: "DISABLE_OPTIMIZED_EXECUTION" value: { string_value: "true" } }
`

// model writes repo/name/config.pbtxt and a model file in each version directory.
func model(t *testing.T, repo, name, config string, versions ...string) {
	t.Helper()
	dir := filepath.Join(repo, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if config != "" {
		write(t, filepath.Join(dir, ConfigFile), config)
	}
	for _, v := range versions {
		write(t, filepath.Join(dir, v, "model.pt"), "not read here")
	}
}

func write(t *testing.T, p, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestReadMapsTheConfig(t *testing.T) {
	repo := t.TempDir()
	model(t, repo, "digits", digitsConfig, "1", "2", "10", "03", "x")
	m := Read(repo, "digits", nil)
	if m.Err != nil {
		t.Fatal(m.Err)
	}
	// latest 1 by default: 10 beats 2 (numbers, not strings); "03" and "x" are no versions.
	if len(m.Versions) != 1 || m.Versions[0].Version != "10" || m.Versions[0].Err != nil {
		t.Fatalf("versions %+v", m.Versions)
	}
	am, err := m.Archive(m.Versions[0])
	if err != nil {
		t.Fatal(err)
	}
	c := am.Config
	want := archive.ModelConfig{
		File: ConfigFile, Handler: "tensor", InteropThreads: 1,
		Settings: archive.Settings{
			BatchSize: archive.Fixed(8), MaxBatchDelay: archive.Fixed(2 * time.Millisecond), JobQueueSize: archive.Of(64),
			ResponseTimeout: archive.Of(500 * time.Millisecond), MinWorkers: archive.Fixed(2), MaxWorkers: archive.Of(2),
			Device: archive.Of("cpu"), Threads: archive.Of(1),
		},
		PreferredBatchSize: []int{4},
		Inputs:             []archive.TensorSpec{{Name: "INPUT__0", DType: "float32", Shape: []int64{-1, 1, 28, 28}}},
		Outputs:            []archive.TensorSpec{{Name: "OUTPUT__0", DType: "float32", Shape: []int64{-1, 10}}},
	}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("config\n got %+v\nwant %+v", c, want)
	}
	if am.Kind != archive.KindTriton || am.SerializedFile != "model.pt" || am.Version != "10" || am.IsPackage() {
		t.Fatalf("archive %+v", am)
	}
	joined := strings.Join(m.Warnings, "\n")
	for _, w := range []string{"DISABLE_OPTIMIZED_EXECUTION"} {
		if !strings.Contains(joined, w) {
			t.Errorf("no warning about %s in %q", w, joined)
		}
	}
}

func TestVersionPolicies(t *testing.T) {
	for policy, want := range map[string][]string{
		"": {"3"},
		`version_policy: { latest: { num_versions: 2 } }`:    {"2", "3"},
		`version_policy: { all: {} }`:                        {"1", "2", "3"},
		`version_policy: { specific: { versions: [1, 3] } }`: {"1", "3"},
	} {
		repo := t.TempDir()
		model(t, repo, "digits", digitsConfig+policy, "1", "2", "3")
		m := Read(repo, "digits", nil)
		var got []string
		for _, v := range m.Versions {
			got = append(got, v.Version)
		}
		if m.Err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%q: versions %v (err %v), want %v", policy, got, m.Err, want)
		}
	}
}

func TestDefaultModelFilenameAndPlatforms(t *testing.T) {
	repo := t.TempDir()
	digitsConfig := strings.Replace(digitsConfig, `name: "digits"`, "", 1) // the directory names it
	model(t, repo, "aoti", strings.Replace(digitsConfig, `"pytorch_libtorch"`, `"torch_aoti"`, 1))
	write(t, filepath.Join(repo, "aoti", "1", "model.pt2"), "x")
	model(t, repo, "named", digitsConfig+`default_model_filename: "traced.pt"`)
	write(t, filepath.Join(repo, "named", "1", "traced.pt"), "x")
	model(t, repo, "backend", strings.Replace(digitsConfig, `platform: "pytorch_libtorch"`, `backend: "pytorch"`, 1), "1")
	for name, file := range map[string]string{"aoti": "model.pt2", "named": "traced.pt", "backend": "model.pt"} {
		m := Read(repo, name, nil)
		if m.Err != nil || m.Versions[0].Err != nil {
			t.Fatalf("%s: %v %+v", name, m.Err, m.Versions)
		}
		if got := filepath.Base(m.Versions[0].Path); got != file {
			t.Errorf("%s: file %s, want %s", name, got, file)
		}
	}
}

// TestHostileRepository: each model that cannot be served gets its own clear reason.
func TestHostileRepository(t *testing.T) {
	repo := t.TempDir()
	outside := t.TempDir()
	write(t, filepath.Join(outside, "model.pt"), "x")
	write(t, filepath.Join(outside, ConfigFile), digitsConfig)
	cases := map[string]struct {
		config, reason string
		setup          func(dir string)
	}{
		"malformed":          {config: `name: "malformed" platform: "pytorch_libtorch" input [ { name: "x" `, reason: "config.pbtxt:"},
		"unknown_type":       {config: strings.Replace(digitsConfig, "TYPE_FP32", "TYPE_FLOAT99", 1), reason: "TYPE_FLOAT99"},
		"string_type":        {config: strings.Replace(digitsConfig, "TYPE_FP32", "TYPE_STRING", 1), reason: "TYPE_STRING has no LibTorch tensor type"},
		"tensorflow":         {config: strings.Replace(digitsConfig, "pytorch_libtorch", "tensorflow_savedmodel", 1), reason: `platform "tensorflow_savedmodel"`},
		"tensorrt":           {config: strings.Replace(digitsConfig, "pytorch_libtorch", "tensorrt_plan", 1), reason: "a TensorRT engine is built for one GPU"},
		"onnx_on_gpu":        {config: strings.Replace(digitsConfig, "pytorch_libtorch", "onnxruntime_onnx", 1) + "instance_group [{kind: KIND_GPU}]", reason: "ONNX Runtime's CPU build"},
		"onnx_with_tensorrt": {config: strings.Replace(digitsConfig, "pytorch_libtorch", "onnxruntime_onnx", 1) + `optimization { execution_accelerators { gpu_execution_accelerator: [ { name: "tensorrt" } ] } }`, reason: `gpu_execution_accelerator "tensorrt"`},
		"ensemble":           {config: `platform: "ensemble" max_batch_size: 1 input [ { name: "a" data_type: TYPE_FP32 dims: [1] } ] output [ { name: "b" data_type: TYPE_FP32 dims: [1] } ]`, reason: "an ensemble"},
		"ensemble_cycle": {config: `platform: "ensemble" input [ { name: "IN" data_type: TYPE_FP32 dims: [1] } ] output [ { name: "OUT" data_type: TYPE_FP32 dims: [1] } ]
ensemble_scheduling { step [ { model_name: "a" model_version: -1 input_map { key: "x" value: "T2" } output_map { key: "y" value: "T1" } },
  { model_name: "b" model_version: -1 input_map { key: "x" value: "T1" } output_map { key: "y" value: "T2" } } ] }`, reason: "a cycle"},
		"ensemble_self": {config: `platform: "ensemble" input [ { name: "IN" data_type: TYPE_FP32 dims: [1] } ] output [ { name: "OUT" data_type: TYPE_FP32 dims: [1] } ]
ensemble_scheduling { step [ { model_name: "ensemble_self" model_version: -1 input_map { key: "x" value: "IN" } output_map { key: "y" value: "OUT" } } ] }`, reason: "runs the ensemble itself"},
		"ensemble_no_output": {config: `platform: "ensemble" input [ { name: "IN" data_type: TYPE_FP32 dims: [1] } ] output [ { name: "OUT" data_type: TYPE_FP32 dims: [1] } ]
ensemble_scheduling { step [ { model_name: "a" model_version: -1 input_map { key: "x" value: "IN" } output_map { key: "y" value: "ELSE" } } ] }`, reason: `output "OUT" is not the output of any step`},
		"python_conda":     {config: `backend: "python" input [ { name: "a" data_type: TYPE_FP32 dims: [1] } ] output [ { name: "b" data_type: TYPE_FP32 dims: [1] } ] parameters { key: "EXECUTION_ENV_PATH" value: { string_value: "$$TRITON_MODEL_DIRECTORY/env.tar.gz" } }`, reason: "not in a packed environment"},
		"python_bf16":      {config: `backend: "python" input [ { name: "a" data_type: TYPE_BF16 dims: [1] } ] output [ { name: "b" data_type: TYPE_FP32 dims: [1] } ]`, reason: "TYPE_BF16 has no numpy type"},
		"python_decoupled": {config: `backend: "python" input [ { name: "a" data_type: TYPE_FP32 dims: [1] } ] output [ { name: "b" data_type: TYPE_FP32 dims: [1] } ] model_transaction_policy { decoupled: true }`, reason: "decoupled"},
		"sequence":         {config: strings.Replace(digitsConfig, "dynamic_batching {", "sequence_batching {} x_dynamic_batching {", 1), reason: "config.pbtxt"},
		"stateful":         {config: digitsConfig[:strings.Index(digitsConfig, "dynamic_batching")] + "sequence_batching { max_sequence_idle_microseconds: 5000000 }", reason: "sequence_batching"},
		"priorities":       {config: strings.Replace(digitsConfig, "max_queue_delay_microseconds: 2000", "max_queue_delay_microseconds: 2000 priority_levels: 2", 1), reason: "priority_levels 2"},
		"preferred_above":  {config: strings.Replace(digitsConfig, "preferred_batch_size: [ 4 ]", "preferred_batch_size: [ 4, 16 ]", 1), reason: "preferred_batch_size [4 16]: each size must be from 1 to max_batch_size (8)"},
		"preferred_zero":   {config: strings.Replace(digitsConfig, "preferred_batch_size: [ 4 ]", "preferred_batch_size: [ 0 ]", 1), reason: "each size must be from 1 to max_batch_size"},
		"delay_action":     {config: strings.Replace(digitsConfig, "max_queue_size: 64", "max_queue_size: 64 timeout_action: DELAY", 1), reason: "timeout_action DELAY"},
		"kind_model":       {config: strings.Replace(digitsConfig, "KIND_CPU", "KIND_MODEL", 1), reason: "KIND_MODEL"},
		"wrong_name":       {config: strings.Replace(digitsConfig, `name: "digits"`, `name: "other"`, 1), reason: `name "other" differs`},
		"no_config":        {reason: "no config.pbtxt"},
		"bad_param":        {config: digitsConfig + `parameters: { key: "INFERENCE_MODE" value: { string_value: "maybe" } }`, reason: "INFERENCE_MODE: want true or false"},
		"bad_reshape":      {config: strings.Replace(digitsConfig, "dims: [ 10 ]", "dims: [ 10 ] reshape: { shape: [ 3, 3 ] }", 1), reason: "reshape [3 3] does not hold the 10 elements"},
		"no_versions":      {config: strings.Replace(digitsConfig, `"digits"`, `"no_versions"`, 1), reason: "no version directory"},
		"huge_dims":        {config: strings.Replace(digitsConfig, "dims: [ 1, 28, 28 ]", "dims: [ 100000, 100000, 100000 ]", 1), reason: "holds more than the 1024 MiB a sample may"},
		"link_config": {setup: func(dir string) {
			os.Symlink(filepath.Join(outside, ConfigFile), filepath.Join(dir, ConfigFile))
		}, reason: "outside the model repository"},
	}
	for name, c := range cases {
		cfg := strings.Replace(c.config, `name: "digits"`, `name: "`+name+`"`, 1)
		versions := []string{"1"}
		if name == "no_versions" {
			versions = nil
		}
		model(t, repo, name, cfg, versions...)
		if c.setup != nil {
			c.setup(filepath.Join(repo, name))
		}
	}
	// A model directory that is a link out of the repository.
	os.Symlink(outside, filepath.Join(repo, "link_dir"))
	cases["link_dir"] = struct {
		config, reason string
		setup          func(dir string)
	}{reason: "outside the model repository"}

	names, err := List(repo)
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != len(cases) {
		t.Fatalf("List: %v", names)
	}
	for name, c := range cases {
		m := Read(repo, name, nil)
		if m.Err == nil || !strings.Contains(m.Err.Error(), c.reason) {
			t.Errorf("%s: error %v, want one saying %q", name, m.Err, c.reason)
		}
	}

	// Version-level refusals leave the model readable: the version says why.
	model(t, repo, "digits", digitsConfig+`version_policy: { all: {} }`, "1")
	if err := os.MkdirAll(filepath.Join(repo, "digits", "2"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(repo, "digits", "3"), 0o755)
	os.Symlink(filepath.Join(outside, "model.pt"), filepath.Join(repo, "digits", "3", "model.pt"))
	m := Read(repo, "digits", nil)
	if m.Err != nil || len(m.Versions) != 3 {
		t.Fatalf("digits: %v %+v", m.Err, m.Versions)
	}
	for i, want := range []string{"", "version 2 has no model.pt", "outside the model repository"} {
		err := m.Versions[i].Err
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("version %s: %v, want %q", m.Versions[i].Version, err, want)
		}
	}
}

func TestConfigOverride(t *testing.T) {
	repo := t.TempDir()
	model(t, repo, "digits", digitsConfig, "1")
	m := Read(repo, "digits", []byte(`{"platform": "pytorch_libtorch", "max_batch_size": 2,
		"input": [{"name": "INPUT__0", "data_type": "TYPE_FP32", "dims": [1, 28, 28]}],
		"output": [{"name": "OUTPUT__0", "data_type": "TYPE_FP32", "dims": [10]}]}`))
	if m.Err != nil || m.Config.MaxBatchSize != 2 || m.Config.Name != "digits" {
		t.Fatalf("%v %v", m.Err, m.Config)
	}
	if m := Read(repo, "digits", []byte(`{"max_batch_size": "x"`)); m.Err == nil || !strings.Contains(m.Err.Error(), "config override") {
		t.Fatalf("malformed override: %v", m.Err)
	}
}

func TestNamingRules(t *testing.T) {
	specs := func(names ...string) []archive.TensorSpec {
		var out []archive.TensorSpec
		for _, n := range names {
			out = append(out, archive.TensorSpec{Name: n})
		}
		return out
	}
	for _, c := range []struct {
		names, args []string
		want        []int
		err         string
	}{
		{names: []string{"y", "x"}, args: []string{"x", "y"}, want: []int{1, 0}},               // forward's names
		{names: []string{"INPUT__1", "INPUT__0"}, args: []string{"a", "b"}, want: []int{1, 0}}, // <name>__<index>
		{names: []string{"image", "mask"}, args: []string{"a", "b"}, want: []int{0, 1}},        // config order
		{names: []string{"x", "INPUT__0"}, args: []string{"x", "y"}, want: []int{0, 1}},        // mixed: config order
		{names: []string{"INPUT__0", "INPUT__0"}, args: []string{"a", "b"}, err: "once each"},  // duplicate index
		{names: []string{"INPUT__0"}, args: []string{"a", "b"}, err: "declares 1 inputs, the model's forward takes 2"},
	} {
		got, err := InputOrder(specs(c.names...), c.args)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%v %v: error %v, want %q", c.names, c.args, err, c.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%v %v: %v %v, want %v", c.names, c.args, got, err, c.want)
		}
	}
	if got, _ := OutputOrder(specs("OUT__1", "OUT__0")); !reflect.DeepEqual(got, []int{1, 0}) {
		t.Errorf("outputs by index: %v", got)
	}
	if got, _ := OutputOrder(specs("logits", "OUT__0")); !reflect.DeepEqual(got, []int{0, 1}) {
		t.Errorf("outputs in config order: %v", got)
	}
}

// A version directory of a package holds its variants too, as an archive does: model_bf16.pt2
// beside model.pt2 is the bf16 package the precision setting serves. A link is not followed,
// and a variant that is not the same model refuses the version with its name.
func TestPackageVariants(t *testing.T) {
	zoo := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join("..", "..", "models", "out", "digits", name))
		if err != nil {
			t.Fatalf("no zoo package (run make models): %v", err)
		}
		return b
	}
	repo := t.TempDir()
	cfg := strings.Replace(strings.Replace(digitsConfig, `name: "digits"`, "", 1), `"pytorch_libtorch"`, `"torch_aoti"`, 1)
	model(t, repo, "aoti", cfg)
	dir := filepath.Join(repo, "aoti", "1")
	write(t, filepath.Join(dir, "model.pt2"), string(zoo("model.pt2")))
	write(t, filepath.Join(dir, "model_bf16.pt2"), string(zoo("model_bf16.pt2")))
	if err := os.Symlink(filepath.Join(dir, "model_bf16.pt2"), filepath.Join(dir, "model_fp16.pt2")); err != nil {
		t.Fatal(err)
	}
	m := Read(repo, "aoti", nil)
	am, err := m.Archive(m.Versions[0])
	if err != nil {
		t.Fatal(err)
	}
	if got := am.PackagePrecisions(); !reflect.DeepEqual(got, []string{"fp32", "bf16"}) {
		t.Fatalf("precisions %v, want [fp32 bf16] (the link is not a variant)", got)
	}
	if file, _, ok := am.PackageFor("bf16"); !ok || filepath.Base(file) != "model_bf16.pt2" {
		t.Fatalf("bf16 package: %s %v", file, ok)
	}

	// A "bf16" variant that is the fp32 package: refused, naming the file.
	write(t, filepath.Join(dir, "model_bf16.pt2"), string(zoo("model.pt2")))
	m = Read(repo, "aoti", nil)
	if _, err := m.Archive(m.Versions[0]); err == nil || !strings.Contains(err.Error(), "model_bf16.pt2") {
		t.Fatalf("a mislabelled variant: %v", err)
	}
}
