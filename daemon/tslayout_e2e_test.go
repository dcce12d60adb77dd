package daemon_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"image"
	"image/color"
	"image/png"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// kserveV2Properties is KServe's docs/samples/v1beta1/torchserve/v2/config.properties as
// KServe ships it: TorchServe's layout, which KServe's storage initializer puts under
// /mnt/models (config/config.properties and model-store/mnist.mar).
const kserveV2Properties = `inference_address=http://0.0.0.0:8085
management_address=http://0.0.0.0:8085
metrics_address=http://0.0.0.0:8082
grpc_inference_port=7070
grpc_management_port=7071
enable_metrics_api=true
metrics_format=prometheus
number_of_netty_threads=4
job_queue_size=10
enable_envvars_config=true
install_py_dep_per_model=false
model_store=/mnt/models/model-store
model_snapshot={"name":"startup.cfg","modelCount":1,"models":{"mnist":{"1.0":{"defaultVersion":true,"marName":"mnist.mar","minWorkers":1,"maxWorkers":5,"batchSize":2,"maxBatchDelay":500,"responseTimeout":60}}}}
`

// torchServeTree writes KServe's layout into a new directory: config/config.properties and
// model-store/ holding the given archives (file name → source path).
func torchServeTree(t *testing.T, properties string, archives map[string]string) (root string) {
	t.Helper()
	root = t.TempDir()
	for _, d := range []string{"config", "model-store"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "config", "config.properties"), []byte(properties), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, src := range archives {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, "model-store", name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// `torchd serve --ts-config` serves KServe's TorchServe layout unchanged: the model_snapshot's
// model loads at start under its snapshot name with its workers and batching, and answers
// KServe v1 ({"instances": [{"data": b64}]}, as KServe's mnist.json) and v2 (an FP32 tensor,
// as its tensor_conv sample). The addresses and model store are given as flags, as the
// ServingRuntime gives them, and win over the file's.
func TestTorchServeLayoutKServe(t *testing.T) {
	root := torchServeTree(t, kserveV2Properties, map[string]string{"mnist.mar": filepath.Join(store, "digits.mar")})
	s := startServer(t, "--ts-config", filepath.Join(root, "config", "config.properties"), "--model-store", filepath.Join(root, "model-store"))
	s.waitHealthy(t)

	var desc []struct {
		ModelName    string `json:"modelName"`
		BatchSize    int    `json:"batchSize"`
		MaxBatchDel  int    `json:"maxBatchDelay"`
		MinWorkers   int    `json:"minWorkers"`
		MaxWorkers   int    `json:"maxWorkers"`
		RespTimeout  int    `json:"responseTimeout"`
		JobQueueSize int    `json:"jobQueueSize"`
	}
	do(t, "GET", s.mgmt+"/models/mnist", "", nil).json(t, &desc)
	if len(desc) != 1 || desc[0].BatchSize != 2 || desc[0].MaxBatchDel != 500 || desc[0].MinWorkers != 1 || desc[0].MaxWorkers != 5 || desc[0].RespTimeout != 60 {
		t.Fatalf("mnist as the snapshot describes it: %+v", desc)
	}
	if !strings.Contains(s.Log(), "key not used by torchd") || !strings.Contains(s.Log(), "number_of_netty_threads") {
		t.Errorf("the ignored key number_of_netty_threads is not logged:\n%s", s.Log())
	}

	pngs, labels := heldOut(t)
	for i := range 3 {
		v1, _ := json.Marshal(map[string]any{"instances": []any{map[string]string{"data": base64.StdEncoding.EncodeToString(pngs[i])}}})
		r := do(t, "POST", s.inf+"/v1/models/mnist:predict", "application/json", v1)
		var p struct{ Predictions []json.RawMessage }
		r.json(t, &p)
		if r.status != 200 || len(p.Predictions) != 1 || topLabel(t, p.Predictions[0]) != labels[i] {
			t.Errorf("v1 digit %d: %d %s, want top-1 %q", i, r.status, r.body, labels[i])
		}

		r = do(t, "POST", s.inf+"/v2/models/mnist/infer", "application/json", v2Body("input-0", []int{1, 28, 28}, digitsTensor(t, pngs[i])))
		var resp tsV2Response
		r.json(t, &resp)
		if r.status != 200 || resp.ModelName != "mnist" || len(resp.Outputs) != 1 || len(resp.Outputs[0].Data) != 1 || top1(resp.Outputs[0].Data[0]) != labels[i] {
			t.Errorf("v2 digit %d: %d %s, want top-1 %q", i, r.status, r.body, labels[i])
		}
	}
}

// config.properties' models key sets a load_models model's workers and batching by its name
// and archive version, above default_workers_per_model, as TorchServe's; a registration through
// the API takes the key's batching and not its workers.
func TestTorchServeLayoutModelsKey(t *testing.T) {
	props := "load_models=mnist=mnist.mar\ndefault_workers_per_model=3\n" +
		`models={"mnist": {"1.0": {"defaultVersion": true, "marName": "mnist.mar", "minWorkers": 1, "maxWorkers": 2, "batchSize": 4, "maxBatchDelay": 100, "responseTimeout": 90}}}` + "\n"
	root := torchServeTree(t, props, map[string]string{"mnist.mar": filepath.Join(store, "digits.mar")})
	s := startServer(t, "--ts-config", filepath.Join(root, "config", "config.properties"), "--model-store", filepath.Join(root, "model-store"))
	s.waitHealthy(t)
	type described struct {
		ModelVersion string `json:"modelVersion"`
		BatchSize    int    `json:"batchSize"`
		MaxBatchDel  int    `json:"maxBatchDelay"`
		MinWorkers   int    `json:"minWorkers"`
		MaxWorkers   int    `json:"maxWorkers"`
		RespTimeout  int    `json:"responseTimeout"`
	}
	var desc []described
	do(t, "GET", s.mgmt+"/models/mnist", "", nil).json(t, &desc)
	if want := (described{"1.0", 4, 100, 1, 2, 90}); len(desc) != 1 || desc[0] != want {
		t.Fatalf("mnist as the models key sets it: %+v, want %+v", desc, want)
	}
	pngs, labels := heldOut(t)
	if r := do(t, "POST", s.inf+"/predictions/mnist", "image/png", pngs[0]); r.status != 200 || top1(r.body) != labels[0] {
		t.Fatalf("predict: %d %s", r.status, r.body)
	}

	if r := do(t, "DELETE", s.mgmt+"/models/mnist/1.0", "", nil); r.status != 200 {
		t.Fatalf("unregister: %d %s", r.status, r.body)
	}
	if r := do(t, "POST", s.mgmt+"/models?url=mnist.mar&model_name=mnist&initial_workers=1&synchronous=true", "", nil); r.status != 200 {
		t.Fatalf("register: %d %s", r.status, r.body)
	}
	desc = nil
	do(t, "GET", s.mgmt+"/models/mnist", "", nil).json(t, &desc)
	if len(desc) != 1 || desc[0].BatchSize != 4 || desc[0].MaxBatchDel != 100 || desc[0].RespTimeout != 90 || desc[0].MinWorkers != 1 || desc[0].MaxWorkers == 2 {
		t.Errorf("mnist registered through the API: %+v, want the key's batching and response timeout, and not its max workers", desc)
	}
}

// metrics_mode=log writes TorchServe's frontend metrics to $METRICS_LOCATION/ts_metrics.log
// in TorchServe's log form, one line per update, beside the metrics port's.
func TestTorchServeLayoutMetricsLog(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "metrics")
	t.Setenv("METRICS_LOCATION", dir)
	root := torchServeTree(t, "metrics_mode=log\nload_models=mnist=mnist.mar\n", map[string]string{"mnist.mar": filepath.Join(store, "digits.mar")})
	s := startServer(t, "--ts-config", filepath.Join(root, "config", "config.properties"), "--model-store", filepath.Join(root, "model-store"))
	s.waitHealthy(t)
	pngs, _ := heldOut(t)
	for _, path := range []string{"/predictions/mnist", "/predictions/mnist/1.0"} {
		if r := do(t, "POST", s.inf+path, "image/png", pngs[0]); r.status != 200 {
			t.Fatalf("%s: %d %s", path, r.status, r.body)
		}
	}
	do(t, "POST", s.inf+"/predictions/mnist", "image/png", []byte("garbage")) // 400
	b, err := os.ReadFile(filepath.Join(dir, "ts_metrics.log"))
	if err != nil {
		t.Fatal(err)
	}
	host := regexp.QuoteMeta(hostname(t))
	line := func(metric string) *regexp.Regexp {
		return regexp.MustCompile(`(?m)^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d,\d{3} - ` + metric + `\|#hostname:` + host + `,timestamp:\d{10}$`)
	}
	for pat, want := range map[string]int{
		`Requests2XX\.Count:1\.0\|#Level:Host`:                                                            2,
		`Requests4XX\.Count:1\.0\|#Level:Host`:                                                            1,
		`ts_inference_requests_total\.Count:1\.0\|#model_name:mnist,model_version:default`:                2,
		`ts_inference_requests_total\.Count:1\.0\|#model_name:mnist,model_version:1\.0`:                   1,
		`ts_inference_latency_microseconds\.Microseconds:\d+\.0\|#model_name:mnist,model_version:default`: 2,
		`ts_queue_latency_microseconds\.Microseconds:\d+\.0\|#model_name:mnist,model_version:1\.0`:        1,
		`WorkerThreadTime\.Milliseconds:[0-9.E-]+\|#Level:Host`:                                           2,
	} {
		// /ping's answers count in Requests2XX, and warm-up batches in WorkerThreadTime.
		if n := len(line(pat).FindAll(b, -1)); n != want && !(n > want && (strings.HasPrefix(pat, "Requests2XX") || strings.HasPrefix(pat, "WorkerThreadTime"))) {
			t.Errorf("%d lines match %s, want %d; ts_metrics.log:\n%s", n, pat, want, b)
		}
	}

	// A ts_metrics.log that cannot be made stops the start, with the file named.
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(torchdBin, "serve", "--ts-config", filepath.Join(root, "config", "config.properties"), "--model-store", filepath.Join(root, "model-store"))
	cmd.Env = append(os.Environ(), "METRICS_LOCATION="+notDir)
	out, err := cmd.CombinedOutput()
	if want := "metrics_mode=log: " + filepath.Join(notDir, "ts_metrics.log") + ": not a directory"; err == nil || !strings.Contains(string(out), want) {
		t.Errorf("METRICS_LOCATION a file: %v, %s\nwant %q", err, out, want)
	}
}

// KServe's examples give the inference and management APIs one address, which TorchServe
// serves on one port; so does torchd. A config.properties that torchd cannot take stops it
// at start with the file and the key in the message.
func TestTorchServeLayoutSharedPortAndErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	// Two versions of mnist, the second the default.
	snapshot := `{"1.0":{"marName":"mnist.mar","minWorkers":1},"2.0":{"defaultVersion":true,"marName":"mnist_v2.mar","minWorkers":1}}`
	props := strings.NewReplacer("http://0.0.0.0:8085", "http://"+addr, "0.0.0.0:8082", "127.0.0.1:0",
		`{"1.0":{"defaultVersion":true,"marName":"mnist.mar","minWorkers":1,"maxWorkers":5,"batchSize":2,"maxBatchDelay":500,"responseTimeout":60}}`, snapshot).Replace(kserveV2Properties)
	root := torchServeTree(t, props, map[string]string{"mnist.mar": filepath.Join(store, "digits.mar"), "mnist_v2.mar": filepath.Join(store, "v2", "digits.mar")})
	cfg := filepath.Join(root, "config", "config.properties")
	// The harness's address flags would win over the file's: give the file's again.
	s := startServer(t, "--ts-config", cfg, "--model-store", filepath.Join(root, "model-store"), "--inference-address", addr, "--management-address", addr)
	s.waitHealthy(t)
	if s.mgmt != s.inf {
		t.Fatalf("management on %s, inference on %s: want one port", s.mgmt, s.inf)
	}
	if r := do(t, "GET", s.inf+"/models", "", nil); r.status != 200 || !strings.Contains(string(r.body), `"mnist"`) {
		t.Fatalf("management's list on the shared port: %d %s", r.status, r.body)
	}
	pngs, labels := heldOut(t)
	if r := do(t, "POST", s.inf+"/predictions/mnist", "image/png", pngs[0]); r.status != 200 || top1(r.body) != labels[0] {
		t.Fatalf("inference on the shared port: %d %s", r.status, r.body)
	}
	var desc []struct {
		ModelVersion string `json:"modelVersion"`
	}
	do(t, "GET", s.inf+"/models/mnist", "", nil).json(t, &desc)
	if len(desc) != 1 || desc[0].ModelVersion != "2.0" {
		t.Errorf("the snapshot's defaultVersion 2.0 is not the default: %+v", desc)
	}

	for _, c := range []struct{ props, want string }{
		{"inference_address=8080\n", `key inference_address: want http://host:port or https://host:port, got "8080"`},
		{"job_queue_size=ten\n", `key job_queue_size: want an integer ≥ 1, got "ten"`},
		{"metrics_mode=json\n", `key metrics_mode: want prometheus or log, got "json"`},
		{`model_snapshot={"models":{"m":{"1.0":{"marName":"m.mar","minWorkers":-1}}}}` + "\n", "model m version 1.0: minWorkers: must be an integer >= 0, got -1"},
		{"model_snapshot={\"models\"\n", "not the JSON of a TorchServe snapshot"},
		{"inference_address=https://127.0.0.1:8443\n", "an https:// address needs certificate_file and private_key_file"},
	} {
		p := filepath.Join(t.TempDir(), "config.properties")
		os.WriteFile(p, []byte(c.props), 0o644)
		out, err := exec.Command(torchdBin, "serve", "--ts-config", p).CombinedOutput()
		if err == nil || !strings.Contains(string(out), c.want) || !strings.Contains(string(out), p) {
			t.Errorf("%q: %v\n%s\nwant %q", c.props, err, out, c.want)
		}
	}
	out, err := exec.Command(torchdBin, "serve", "--ts-config", filepath.Join(root, "nothing.properties")).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "no such file") {
		t.Errorf("a missing config.properties: %v %s", err, out)
	}
}

// topLabel is the label of the largest probability of a {"label": probability} object, whatever
// the order of its keys.
func topLabel(t *testing.T, b []byte) string {
	var probs map[string]float64
	if err := json.Unmarshal(b, &probs); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	best := ""
	for k, p := range probs {
		if best == "" || p > probs[best] {
			best = k
		}
	}
	return best
}

// digitsTensor is a held-out digit as the digits model takes it: [1, 28, 28], pixels/255
// normalized with mean 0.5 and std 0.5, as JSON data.
func digitsTensor(t *testing.T, b []byte) []float32 {
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if img.Bounds() != image.Rect(0, 0, 28, 28) {
		t.Fatalf("held-out digit is %v", img.Bounds())
	}
	out := make([]float32, 0, 28*28)
	for y := range 28 {
		for x := range 28 {
			g := color.GrayModel.Convert(img.At(x, y)).(color.Gray)
			out = append(out, (float32(g.Y)/255-0.5)/0.5)
		}
	}
	return out
}

func v2Body(name string, shape []int, data []float32) []byte {
	b, _ := json.Marshal(map[string]any{"id": "req-1", "inputs": []any{map[string]any{"name": name, "shape": shape, "datatype": "FP32", "data": data}}})
	return b
}

type tsV2Response struct {
	ID           string `json:"id"`
	ModelName    string `json:"model_name"`
	ModelVersion string `json:"model_version"`
	Outputs      []struct {
		Name     string            `json:"name"`
		Datatype string            `json:"datatype"`
		Shape    []int64           `json:"shape"`
		Data     []json.RawMessage `json:"data"`
	} `json:"outputs"`
}
