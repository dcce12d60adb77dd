package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/torchd/torchd/archive"
)

func writeProperties(t *testing.T, body string) string {
	p := filepath.Join(t.TempDir(), "config.properties")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// KServe's v1 sample config.properties, as KServe ships it.
const kserveV1Properties = `inference_address=http://0.0.0.0:8085
management_address=http://0.0.0.0:8085
metrics_address=http://0.0.0.0:8082
grpc_inference_port=7070
grpc_management_port=7071
enable_metrics_api=true
metrics_format=prometheus
number_of_netty_threads=4
job_queue_size=10
enable_envvars_config=true
install_py_dep_per_model=true
model_store=/mnt/models/model-store
model_snapshot={"name":"startup.cfg","modelCount":1,"models":{"mnist":{"1.0":{"defaultVersion":true,"marName":"mnist.mar","minWorkers":1,"maxWorkers":5,"batchSize":1,"maxBatchDelay":5000,"responseTimeout":120}}}}
`

// Each key of KServe's config.properties maps to torchd's setting of the same meaning, and
// the model_snapshot to a start-up registration with its settings.
func TestTorchServeConfigKServe(t *testing.T) {
	c, err := LoadConfig([]string{"--ts-config", writeProperties(t, kserveV1Properties)}, envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.InferenceAddress != "0.0.0.0:8085" || c.ManagementAddress != "0.0.0.0:8085" || c.MetricsAddress != "0.0.0.0:8082" {
		t.Errorf("addresses %q %q %q", c.InferenceAddress, c.ManagementAddress, c.MetricsAddress)
	}
	if c.GRPCInferenceAddress != "127.0.0.1:7070" || c.GRPCManagementAddress != "127.0.0.1:7071" {
		t.Errorf("gRPC %q %q", c.GRPCInferenceAddress, c.GRPCManagementAddress)
	}
	if c.ModelStore != "/mnt/models/model-store" || !c.EnableMetrics || !c.InstallPyDeps || c.Model.JobQueueSize != archive.Of(10) {
		t.Errorf("model_store %q, metrics %v, install_py_dep_per_model %v, job_queue_size %+v", c.ModelStore, c.EnableMetrics, c.InstallPyDeps, c.Model.JobQueueSize)
	}
	ts := c.TorchServe
	if ts == nil || len(ts.Models) != 1 {
		t.Fatalf("snapshot models: %+v", ts)
	}
	m := ts.Models[0]
	want := archive.Settings{MinWorkers: archive.Fixed(1), MaxWorkers: archive.Of(5), BatchSize: archive.Fixed(1),
		MaxBatchDelay: archive.Fixed(5000 * time.Millisecond), ResponseTimeout: archive.Of(120 * time.Second)}
	if m.Name != "mnist" || m.Version != "1.0" || m.MarName != "mnist.mar" || !m.Default || m.Settings != want {
		t.Errorf("model %+v\nwant settings %+v", m, want)
	}
	var ignored []string
	for _, k := range ts.Ignored {
		ignored = append(ignored, k.Key)
	}
	if strings.Join(ignored, ",") != "number_of_netty_threads" {
		t.Errorf("ignored keys %v, want number_of_netty_threads", ignored)
	}
}

// Precedence: flags > TORCHD_ variables > torchd.toml > config.properties, whose keys the
// TS_ variables override only with enable_envvars_config=true, as in TorchServe.
func TestTorchServeConfigPrecedence(t *testing.T) {
	p := writeProperties(t, kserveV1Properties)
	env := map[string]string{"TS_JOB_QUEUE_SIZE": "33", "TS_INFERENCE_ADDRESS": "http://127.0.0.1:9000", "TORCHD_METRICS_ADDRESS": "127.0.0.1:9002"}
	c, err := LoadConfig([]string{"--ts-config", p, "--management-address", "127.0.0.1:9001"}, envOf(env))
	if err != nil {
		t.Fatal(err)
	}
	if c.InferenceAddress != "127.0.0.1:9000" || c.ManagementAddress != "127.0.0.1:9001" || c.MetricsAddress != "127.0.0.1:9002" || c.Model.JobQueueSize != archive.Of(33) {
		t.Errorf("got %q %q %q %+v", c.InferenceAddress, c.ManagementAddress, c.MetricsAddress, c.Model.JobQueueSize)
	}
	off := writeProperties(t, strings.Replace(kserveV1Properties, "enable_envvars_config=true", "enable_envvars_config=false", 1))
	c, err = LoadConfig([]string{"--ts-config", off}, envOf(env))
	if err != nil {
		t.Fatal(err)
	}
	if c.InferenceAddress != "0.0.0.0:8085" || c.Model.JobQueueSize != archive.Of(10) {
		t.Errorf("TS_ variables read without enable_envvars_config: %q %+v", c.InferenceAddress, c.Model.JobQueueSize)
	}
	// TORCHD_TS_CONFIG names the file too.
	if c, err := LoadConfig(nil, envOf(map[string]string{"TORCHD_TS_CONFIG": p})); err != nil || c.TorchServe == nil {
		t.Errorf("TORCHD_TS_CONFIG: %v", err)
	}
}

// load_models is the models setting, unless model_snapshot is there, which wins as in
// TorchServe; a Java properties file's forms all read.
func TestTorchServeConfigLoadModels(t *testing.T) {
	c, err := LoadConfig([]string{"--ts-config", writeProperties(t, "# comment\n! also\nload_models : a=a.mar,\\\n   b.mar\ndefault_workers_per_model 3\ndefault_response_timeout=7\ndisable_token_authorization=false\nvmargs=-Xmx1g\n")}, envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.Models != "a=a.mar,b.mar" || c.Model.MinWorkers != archive.Fixed(3) || c.Model.ResponseTimeout != archive.Of(7*time.Second) || !c.TokenAuth {
		t.Errorf("models %q, workers %+v, response_timeout %+v, token auth %v", c.Models, c.Model.MinWorkers, c.Model.ResponseTimeout, c.TokenAuth)
	}
	if len(c.TorchServe.Ignored) != 1 || c.TorchServe.Ignored[0].Key != "vmargs" {
		t.Errorf("ignored %+v", c.TorchServe.Ignored)
	}
	c, err = LoadConfig([]string{"--ts-config", writeProperties(t, "load_models=all\nmodel_snapshot={\"models\":{}}\n")}, envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.Models != "" || len(c.TorchServe.Ignored) != 1 || c.TorchServe.Ignored[0].Key != "load_models" {
		t.Errorf("load_models beside a snapshot: models %q, ignored %+v", c.Models, c.TorchServe.Ignored)
	}
}

// A properties file that does not parse names its line.
func TestTorchServeConfigMalformed(t *testing.T) {
	_, err := LoadConfig([]string{"--ts-config", writeProperties(t, "job_queue_size=10\nmodel_store=\\u12\n")}, envOf(nil))
	if err == nil || !strings.Contains(err.Error(), "line 2: key model_store: malformed \\uxxxx escape") {
		t.Errorf("got %v", err)
	}
	if _, err := LoadConfig([]string{"--ts-config", writeProperties(t, "grpc_inference_port=70000\n")}, envOf(nil)); err == nil || !strings.Contains(err.Error(), `key grpc_inference_port: want a port number, got "70000"`) {
		t.Errorf("got %v", err)
	}
	if _, err := LoadConfig([]string{"--ts-config", writeProperties(t, `model_snapshot={"models":{"m":{"1.0":{"minWorkers":1}}}}`)}, envOf(nil)); err == nil || !strings.Contains(err.Error(), "model m version 1.0: no marName") {
		t.Errorf("got %v", err)
	}
}

// The models key gives per-model settings by name and archive version, read by the code that
// reads model_snapshot's; its workers apply only to start-up models, as in TorchServe.
func TestTorchServeConfigModelsKey(t *testing.T) {
	props := "load_models=noop.mar\n" + `models={"noop": {"1.0": {"defaultVersion": true, "marName": "noop.mar", "minWorkers": 1, "maxWorkers": 2, "batchSize": 4, "maxBatchDelay": 100, "responseTimeout": 120, "parallelLevel": 2}}}` + "\n"
	c, err := LoadConfig([]string{"--ts-config", writeProperties(t, props)}, envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	want := archive.Settings{MinWorkers: archive.Fixed(1), MaxWorkers: archive.Of(2), BatchSize: archive.Fixed(4),
		MaxBatchDelay: archive.Fixed(100 * time.Millisecond), ResponseTimeout: archive.Of(120 * time.Second)}
	if got := c.TorchServe.PerModel("noop", "1.0", true); got != want {
		t.Errorf("start-up noop 1.0: %+v\nwant %+v", got, want)
	}
	want.MinWorkers, want.MaxWorkers = archive.Tunable[int]{}, archive.Value[int]{}
	if got := c.TorchServe.PerModel("noop", "1.0", false); got != want {
		t.Errorf("registered noop 1.0: %+v\nwant %+v", got, want)
	}
	if got := c.TorchServe.PerModel("noop", "2.0", true); got != (archive.Settings{}) {
		t.Errorf("noop 2.0 is not in the key: %+v", got)
	}
	if got := (*TorchServeConfig)(nil).PerModel("noop", "1.0", true); got != (archive.Settings{}) {
		t.Errorf("no config.properties: %+v", got)
	}
	var ignored []string
	for _, k := range c.TorchServe.Ignored {
		ignored = append(ignored, k.Key)
	}
	if strings.Join(ignored, ",") != "models: parallelLevel,models: defaultVersion,models: marName" {
		t.Errorf("ignored %v", ignored)
	}
	for props, want := range map[string]string{
		"models={\"noop\"\n":                                  "key models: want {\"model\":{\"version\":{\"batchSize\":4,…}}} in JSON",
		`models={"noop":{"1.0":{"batchSize":0}}}` + "\n":      "key models: model noop version 1.0: batchSize: must be an integer >= 1, got 0",
		`models={"noop":{"1.0":{"minWorkers":"one"}}}` + "\n": `key models: model noop version 1.0: minWorkers: want an integer, got "one"`,
		`models={"noop":["1.0"]}` + "\n":                      "key models: want",
	} {
		if _, err := LoadConfig([]string{"--ts-config", writeProperties(t, props)}, envOf(nil)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want %q", props, err, want)
		}
	}
}

// metrics_mode=log names ts_metrics.log where TorchServe writes it: $METRICS_LOCATION, else logs/.
func TestTorchServeConfigMetricsLog(t *testing.T) {
	p := writeProperties(t, "metrics_mode=log\n")
	for env, want := range map[string]string{"": filepath.Join("logs", "ts_metrics.log"), "/var/log/ts": "/var/log/ts/ts_metrics.log"} {
		c, err := LoadConfig([]string{"--ts-config", p}, envOf(map[string]string{"METRICS_LOCATION": env}))
		if err != nil {
			t.Fatal(err)
		}
		if c.TorchServe.MetricsLog != want || len(c.TorchServe.Ignored) != 0 {
			t.Errorf("METRICS_LOCATION=%q: %q, ignored %+v; want %q", env, c.TorchServe.MetricsLog, c.TorchServe.Ignored, want)
		}
	}
	c, err := LoadConfig([]string{"--ts-config", writeProperties(t, "metrics_mode=prometheus\n")}, envOf(nil))
	if err != nil || c.TorchServe.MetricsLog != "" {
		t.Errorf("metrics_mode=prometheus: %v %+v", err, c.TorchServe)
	}
}
