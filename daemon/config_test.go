package daemon

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/core"
)

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func writeTOML(t *testing.T, body string) string {
	p := filepath.Join(t.TempDir(), "torchd.toml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestConfigDefaults(t *testing.T) {
	c, err := LoadConfig(nil, envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.InferenceAddress != "127.0.0.1:8080" || c.ManagementAddress != "127.0.0.1:8081" || c.MetricsAddress != "127.0.0.1:8082" {
		t.Errorf("addresses %q %q %q", c.InferenceAddress, c.ManagementAddress, c.MetricsAddress)
	}
	if c.MaxRequestSize != 6553500 {
		t.Errorf("defaults %+v", c)
	}
	if c.Model != (archive.Settings{}) {
		t.Errorf("nothing was set, got %+v", c.Model)
	}
	want := ModelSettings{BatchSize: 1, MaxBatchDelay: 100 * time.Millisecond, MinWorkers: 1, MaxWorkers: 1, JobQueueSize: 100,
		ResponseTimeout: 120 * time.Second, StartupTimeout: 120 * time.Second, Device: "cpu", Precision: "fp32"}
	if d := core.Resolve(ModelDefaults()); !reflect.DeepEqual(d, want) {
		t.Errorf("model defaults\n got %+v\nwant %+v", d, want)
	}
	if !c.KeepFreedMemory {
		t.Error("keep_freed_memory should default to true")
	}
	if c, err := LoadConfig(nil, envOf(map[string]string{"TORCHD_KEEP_FREED_MEMORY": "false"})); err != nil || c.KeepFreedMemory {
		t.Errorf("TORCHD_KEEP_FREED_MEMORY=false: %v, %v", c.KeepFreedMemory, err)
	}
	// A lone request goes at once unless asked to wait, as TorchServe's would.
	if c.BatchDelayAlone {
		t.Error("batch_delay_alone should default to false")
	}
	if c, err := LoadConfig([]string{"--batch-delay-alone"}, envOf(nil)); err != nil || !c.BatchDelayAlone {
		t.Errorf("--batch-delay-alone: %v, %v", c.BatchDelayAlone, err)
	}
	if _, err := LoadConfig(nil, envOf(map[string]string{"TORCHD_BATCH_DELAY_ALONE": "sometimes"})); err == nil || !strings.Contains(err.Error(), "TORCHD_BATCH_DELAY_ALONE") {
		t.Errorf("TORCHD_BATCH_DELAY_ALONE=sometimes: %v", err)
	}
}

// flags > environment > torchd.toml > defaults, and the docker-run variables.
func TestConfigPrecedence(t *testing.T) {
	file := writeTOML(t, "batch_size = 4\nmax_batch_delay = 7\nworkers = 3\njob_queue_size = 50\nmodel_store = \"/from/file\"\nallowed_urls = [\"file://.*\", \"https://models\\\\.example/.*\"]\n")
	env := map[string]string{"TORCHD_CONFIG": file, "BATCH_SIZE": "32", "WORKERS": "2", "LINGER_MS": "10", "TORCHD_JOB_QUEUE_SIZE": "60"}
	c, err := LoadConfig([]string{"--job-queue-size", "70"}, envOf(env))
	if err != nil {
		t.Fatal(err)
	}
	if c.Model.BatchSize != archive.Fixed(32) || c.Model.MinWorkers != archive.Fixed(2) || c.Model.MaxBatchDelay != archive.Fixed(10*time.Millisecond) {
		t.Errorf("environment should beat the file: %+v", c.Model)
	}
	if c.Model.JobQueueSize != archive.Of(70) {
		t.Errorf("flag should beat environment: %v", c.Model.JobQueueSize)
	}
	if c.ModelStore != "/from/file" || len(c.AllowedURLs) != 2 {
		t.Errorf("file values: %q %v", c.ModelStore, c.AllowedURLs)
	}
	// TORCHD_BATCH_SIZE is an alias; BATCH_SIZE, listed first, wins when both are set.
	env["TORCHD_BATCH_SIZE"] = "5"
	c, _ = LoadConfig(nil, envOf(env))
	if c.Model.BatchSize != archive.Fixed(32) {
		t.Errorf("BATCH_SIZE over TORCHD_BATCH_SIZE: %v", c.Model.BatchSize)
	}
	// What no source set stays unset, so that an archive's config can give it.
	if c.Model.MaxWorkers.Set || c.Model.Threads.Set || c.Model.Device.Set {
		t.Errorf("unset settings recorded as set: %+v", c.Model)
	}
}

func TestConfigErrors(t *testing.T) {
	cases := []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--batch-size", "0"}, nil, "flag --batch-size: want an integer ≥ 1"},
		{nil, map[string]string{"WORKERS": "many"}, "environment variable WORKERS"},
		{nil, map[string]string{"LINGER_MS": "-3"}, "LINGER_MS"},
		{[]string{"--device", "tpu"}, nil, "want cpu, cuda or cuda:N"},
		{[]string{"--profile", "heap"}, nil, "want one of"},
		{nil, map[string]string{"TORCHD_CONFIG": "/absent/torchd.toml"}, "config /absent/torchd.toml"},
		{[]string{"--config", writeTOML(t, "batch_sise = 3\n")}, nil, `unknown key "batch_sise"`},
		{[]string{"--config", writeTOML(t, "batch_size = [")}, nil, "config"},
		{[]string{"--config", writeTOML(t, "access_log = \"perhaps\"\n")}, nil, "key access_log: want true or false"},
		{nil, map[string]string{"TORCHD_KEEP_FREED_MEMORY": "sometimes"}, `TORCHD_KEEP_FREED_MEMORY: want true or false, got "sometimes"`},
		{nil, map[string]string{"TORCHD_KEEP_FREED_MEMORY_MB": "-1"}, `TORCHD_KEEP_FREED_MEMORY_MB: want an integer ≥ 0, got "-1"`},
		{[]string{"extra"}, nil, "unexpected arguments"},
		{[]string{"--onnx-memory-limit", "-1"}, nil, `flag --onnx-memory-limit: want an integer ≥ 0, got "-1", or "auto"`},
	}
	for _, c := range cases {
		_, err := LoadConfig(c.args, envOf(c.env))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v %v: error %v, want it to contain %q", c.args, c.env, err, c.want)
		}
	}
}

// TestONNXMemoryLimitSetting: onnx_memory_limit is MiB, 0 none, and "auto" (the default)
// half of what the process may use, which this machine can read.
func TestONNXMemoryLimitSetting(t *testing.T) {
	for args, want := range map[string]int64{"": processMemory() / 2, "--onnx-memory-limit 0": 0, "--onnx-memory-limit 64": 64 << 20} {
		c, err := LoadConfig(strings.Fields(args), envOf(nil))
		if err != nil {
			t.Fatal(err)
		}
		if got := c.onnxMemoryLimit(); got != want {
			t.Errorf("%q: %d bytes, want %d", args, got, want)
		}
	}
	if processMemory() <= 0 {
		t.Errorf("the process's memory could not be read")
	}
}

// TestRepositorySettings: --load-model repeats, and Triton's rules on the repository
// settings are checked at start.
func TestRepositorySettings(t *testing.T) {
	c, err := LoadConfig([]string{"--model-repository", "repo", "--model-control-mode", "explicit", "--load-model", "a", "--load-model", "b,c"}, envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(c.LoadModels, " ") != "a b c" || c.ModelControlMode != ControlExplicit || c.RepositoryPollSecs != 15*time.Second {
		t.Fatalf("%+v", c)
	}
	for args, want := range map[string]string{
		"--model-control-mode poll":           "need model_repository",
		"--load-model a":                      "need model_repository",
		"--model-repository r --load-model a": "only read with model_control_mode explicit",
		"--model-repository r --model-control-mode poll --repository-poll-secs 0": "at least 0.1",
		"--model-repository r --model-control-mode sometimes":                     "want one of none, explicit, poll",
	} {
		if _, err := LoadConfig(strings.Fields(args), envOf(nil)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", args, err, want)
		}
	}
}
