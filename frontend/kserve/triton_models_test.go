package kserve_test

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/torchd/torchd/core/coretest"
	"github.com/torchd/torchd/internal/tolerance"
	"github.com/torchd/torchd/internal/zootest"
	"github.com/torchd/torchd/lifecycle"
	pb "github.com/torchd/torchd/proto/inference"
	"github.com/torchd/torchd/torch"
)

// Triton model repositories, built from the zoo with configs written the way Triton users
// write them, served through the repository API, v2 inference, statistics and Triton's
// metrics.

// tritonResNet is Triton's PyTorch quick-deploy config: no batching, reshapes on both sides.
const tritonResNet = `
name: "resnet18"
platform: "pytorch_libtorch"
max_batch_size: 0
input [
  {
    name: "input__0"
    data_type: TYPE_FP32
    dims: [ 3, 224, 224 ]
    reshape { shape: [ 1, 3, 224, 224 ] }
  }
]
output [
  {
    name: "output__0"
    data_type: TYPE_FP32
    dims: [ 1, 1000, 1, 1 ]
    reshape { shape: [ 1, 1000 ] }
  }
]
`

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// v2Out posts a v2 JSON request of one FP32 input and returns the first output's data.
func (s *server) v2Out(uri, input string, shape []int64, data []float32) ([]float64, []int64) {
	t := s.t
	t.Helper()
	body, _ := json.Marshal(map[string]any{"inputs": []map[string]any{{"name": input, "shape": shape, "datatype": "FP32", "data": data}}})
	r := s.do("POST", uri, body)
	if r.status != 200 {
		t.Fatalf("POST %s: %d %s", uri, r.status, r.body)
	}
	var out struct {
		Outputs []struct {
			Shape []int64   `json:"shape"`
			Data  []float64 `json:"data"`
		} `json:"outputs"`
	}
	r.json(t, &out)
	return out.Outputs[0].Data, out.Outputs[0].Shape
}

// tensorData is the tensor handler's answer's data: float32, of shape [1, n].
func tensorData(t testing.TB, r response) []float64 {
	t.Helper()
	if r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	var out struct {
		DType string    `json:"dtype"`
		Shape []int64   `json:"shape"`
		Data  []float64 `json:"data"`
	}
	r.json(t, &out)
	if out.DType != "float32" || len(out.Shape) != 2 || out.Shape[0] != 1 {
		t.Fatalf("tensor response %s", r.body)
	}
	return out.Data
}

// repoIndex returns the repository index as "name version" → "STATE: reason".
func (s *server) repoIndex() map[string]string {
	s.t.Helper()
	var idx []struct{ Name, Version, State, Reason string }
	s.do("POST", "/v2/repository/index", nil).json(s.t, &idx)
	out := map[string]string{}
	for _, e := range idx {
		out[strings.TrimSuffix(e.Name+" "+e.Version, " ")] = strings.TrimSuffix(e.State+": "+e.Reason, ": ")
	}
	return out
}

// settled waits until no model of the repository is loading, and returns the index.
func (s *server) settled() map[string]string {
	s.t.Helper()
	var idx map[string]string
	coretest.WaitFor(s.t, "the repository's loads", func() bool {
		idx = s.repoIndex()
		for _, state := range idx {
			if state == "LOADING" || state == "UNLOADING" {
				return false
			}
		}
		return true
	})
	return idx
}

func digitsInput(seed int) []float32 {
	x := make([]float32, 28*28)
	for i := range x {
		x[i] = float32(math.Sin(float64(i*(seed+1)))) * 0.8
	}
	return x
}

// A repository of zoo models and hostile ones: each hostile model is listed with its reason
// and the rest serve, with the config's names, types and dims, and the same answers as the
// TorchServe API.
func TestTritonRepository(t *testing.T) {
	repo := t.TempDir()
	zootest.RepoModel(t, zooDir, repo, "digits", zootest.TritonDigits, "digits", "model.pt", "1")
	zootest.RepoModel(t, zooDir, repo, "resnet18", tritonResNet, "resnet18", "model.pt", "1")
	// Hostile models, one fault each.
	rename := func(name string) string { return strings.Replace(zootest.TritonDigits, `"digits"`, `"`+name+`"`, 1) }
	zootest.RepoModel(t, zooDir, repo, "bad_dims", strings.Replace(rename("bad_dims"), "dims: [ 1, 28, 28 ]", "dims: [ 3, 32, 32 ]", 1), "digits", "model.pt", "1")
	zootest.RepoModel(t, zooDir, repo, "bad_type", strings.Replace(rename("bad_type"), "TYPE_FP32", "TYPE_FLOAT", 1), "digits", "model.pt", "1")
	zootest.RepoModel(t, zooDir, repo, "malformed", rename("malformed")[:200], "digits", "model.pt", "1")
	zootest.RepoModel(t, zooDir, repo, "no_file", rename("no_file"), "digits", "model.pt")
	if err := os.MkdirAll(filepath.Join(repo, "no_file", "1"), 0o755); err != nil {
		t.Fatal(err)
	}
	zootest.RepoModel(t, zooDir, repo, "escape", rename("escape"), "digits", "model.pt")
	outside := t.TempDir()
	zootest.CopyFile(t, filepath.Join(zooDir, "digits", "model.pt"), filepath.Join(outside, "model.pt"))
	os.MkdirAll(filepath.Join(repo, "escape", "1"), 0o755)
	if err := os.Symlink(filepath.Join(outside, "model.pt"), filepath.Join(repo, "escape", "1", "model.pt")); err != nil {
		t.Fatal(err)
	}
	// Named after forward's argument (x), and warmed up as the config says.
	named := strings.NewReplacer(`"digits"`, `"digits_x"`, `"INPUT__0"`, `"x"`, `"OUTPUT__0"`, `"logits"`).Replace(zootest.TritonDigits) + `
model_warmup [
  { name: "zeros" batch_size: 2 count: 2 inputs { key: "x" value: { data_type: TYPE_FP32 dims: [ 1, 28, 28 ] zero_data: true } } },
  { name: "noise" batch_size: 8 inputs { key: "x" value: { data_type: TYPE_FP32 dims: [ 1, 28, 28 ] random_data: true } } }
]`
	zootest.RepoModel(t, zooDir, repo, "digits_x", named, "digits", "model.pt", "1")
	badWarmup := strings.Replace(named, `"digits_x"`, `"bad_warmup"`, 1)
	zootest.RepoModel(t, zooDir, repo, "bad_warmup", strings.Replace(badWarmup, "TYPE_FP32 dims: [ 1, 28, 28 ] zero_data", "TYPE_INT64 dims: [ 1, 28, 28 ] zero_data", 1), "digits", "model.pt", "1")
	zootest.RepoModel(t, zooDir, repo, "ensemble", `platform: "ensemble" max_batch_size: 8 input [ { name: "x" data_type: TYPE_FP32 dims: [ 1 ] } ] output [ { name: "y" data_type: TYPE_FP32 dims: [ 1 ] } ]`, "", "")
	wantReasons := map[string]string{
		"bad_dims 1":   "failed its warm-up forward",
		"bad_type":     "TYPE_FLOAT",
		"malformed":    "config.pbtxt:",
		"no_file 1":    "version 1 has no model.pt",
		"escape 1":     "outside the model repository",
		"ensemble":     "an ensemble",
		"bad_warmup 1": `model_warmup "zeros": input "x" is float32, the warm-up gives int64`,
	}
	if !torch.CUDAAvailable() {
		zootest.RepoModel(t, zooDir, repo, "gpu", strings.Replace(rename("gpu"), "KIND_CPU", "KIND_GPU", 1), "digits", "model.pt", "1")
		wantReasons["gpu 1"] = "instance_group kind KIND_GPU, but this torchd has no GPU"
	}
	pt2 := filepath.Join(zooDir, "digits", "model.pt2")
	if fileExists(pt2) {
		aoti := strings.Replace(rename("digits_aoti"), "pytorch_libtorch", "torch_aoti", 1)
		zootest.RepoModel(t, zooDir, repo, "digits_aoti", aoti, "digits", "model.pt2", "1")
		zootest.RepoModel(t, zooDir, repo, "aoti_too_big", strings.Replace(strings.Replace(aoti, "digits_aoti", "aoti_too_big", 1), "max_batch_size: 8", "max_batch_size: 128", 1), "digits", "model.pt2", "1")
		wantReasons["aoti_too_big 1"] = "outside the batch range"
	}

	s := newServer(t, serverOptions{repository: repo, controlMode: lifecycle.ControlNone})
	idx := s.settled()
	for k, reason := range wantReasons {
		if got := idx[k]; !strings.HasPrefix(got, "UNAVAILABLE: ") || !strings.Contains(got, reason) {
			t.Errorf("index %q: %q, want UNAVAILABLE with %q (index %v)", k, got, reason, idx)
		}
	}
	if idx["digits 1"] != "READY" || idx["resnet18 1"] != "READY" {
		t.Fatalf("index %v", idx)
	}

	// Integer versions only: "statistics" is advertised.
	if r := s.do("GET", "/v2", nil); !strings.Contains(string(r.body), `"statistics"`) || !strings.Contains(string(r.body), `"model_repository"`) {
		t.Fatalf("server metadata %s", r.body)
	}

	// Metadata shows the config's names, types and dims, with -1 for the batch.
	r := s.do("GET", "/v2/models/digits", nil)
	if want := `"platform":"pytorch_libtorch","inputs":[{"name":"INPUT__0","datatype":"FP32","shape":[-1,1,28,28]}],"outputs":[{"name":"OUTPUT__0","datatype":"FP32","shape":[-1,10]}]`; !strings.Contains(string(r.body), want) {
		t.Fatalf("metadata %s, want %s", r.body, want)
	}
	r = s.do("GET", "/v2/models/resnet18", nil)
	if want := `"inputs":[{"name":"input__0","datatype":"FP32","shape":[3,224,224]}],"outputs":[{"name":"output__0","datatype":"FP32","shape":[1,1000,1,1]}]`; !strings.Contains(string(r.body), want) {
		t.Fatalf("metadata %s, want %s", r.body, want)
	}

	// The same input through the TorchServe API (the digits tensor archive) and KServe v2.
	s.register("url=digits_tensor.mar&initial_workers=1&synchronous=true")
	for i := range 3 {
		x := digitsInput(i)
		body, _ := json.Marshal(map[string]any{"data": x, "shape": []int{1, 1, 28, 28}})
		want := tensorData(t, s.do("POST", "/predictions/digits_tensor", body))
		got, shape := s.v2Out("/v2/models/digits/infer", "INPUT__0", []int64{1, 1, 28, 28}, x)
		if !near(got, want, tolerance.Kernels) || fmt.Sprint(shape) != "[1 10]" {
			t.Fatalf("input %d: v2 %v %v, TorchServe API %v", i, shape, got, want)
		}
		if got, _ := s.v2Out("/v2/models/digits_x/infer", "x", []int64{1, 1, 28, 28}, x); !near(got, want, tolerance.Kernels) {
			t.Fatalf("input %d: by forward's argument name %v, TorchServe API %v", i, got, want)
		}
		if fileExists(pt2) {
			got, _ := s.v2Out("/v2/models/digits_aoti/infer", "INPUT__0", []int64{1, 1, 28, 28}, x)
			if !near(got, want, 1e-4) {
				t.Fatalf("input %d: .pt2 %v, TorchScript %v", i, got, want)
			}
		}
	}
	// Reshapes: the client's [3,224,224] reaches resnet18 as [1,3,224,224], and its
	// [1,1000] answer comes back as [1,1000,1,1], equal to the archive's.
	s.register("url=resnet18.mar&model_name=resnet18_mar&initial_workers=1&synchronous=true")
	img := make([]float32, 3*224*224)
	for i := range img {
		img[i] = float32(i%251)/251 - 0.5
	}
	got, shape := s.v2Out("/v2/models/resnet18/infer", "input__0", []int64{3, 224, 224}, img)
	want, _ := s.v2Out("/v2/models/resnet18_mar/infer", "input__0", []int64{1, 3, 224, 224}, img)
	if fmt.Sprint(shape) != "[1 1000 1 1]" || !near(got, want, 1e-4) {
		t.Fatalf("resnet18: %v %v..., the archive's %v...", shape, got[:3], want[:3])
	}

	// Statistics and Triton's metrics count what was served.
	var stats struct {
		ModelStats []struct {
			Name, Version  string
			InferenceCount uint64                                `json:"inference_count"`
			InferenceStats map[string]struct{ Count, Ns uint64 } `json:"inference_stats"`
			BatchStats     []struct {
				BatchSize uint64 `json:"batch_size"`
			} `json:"batch_stats"`
		} `json:"model_stats"`
	}
	s.do("GET", "/v2/models/digits/versions/1/stats", nil).json(t, &stats)
	st := stats.ModelStats[0]
	if st.Name != "digits" || st.Version != "1" || st.InferenceCount != 3 || st.InferenceStats["success"].Count != 3 ||
		st.InferenceStats["compute_infer"].Count != 3 || st.InferenceStats["compute_infer"].Ns == 0 || len(st.BatchStats) == 0 {
		t.Fatalf("stats %+v", stats)
	}
	if r := s.do("GET", "/v2/models/nope/stats", nil); r.status != 404 || !strings.Contains(string(r.body), `"error"`) {
		t.Fatalf("stats of an unknown model: %d %s", r.status, r.body)
	}
	m := s.scrape()
	for _, line := range []string{`nv_inference_request_success{model="digits",version="1"} 3`, `nv_inference_count{model="digits",version="1"} 3`,
		`nv_inference_request_failure{model="digits",version="1",reason="REJECTED"} 0`, `nv_inference_pending_request_count{model="resnet18",version="1"} 0`} {
		if !strings.Contains(m, line+"\n") {
			t.Errorf("metrics lack %s", line)
		}
	}
}

// The repository API in explicit mode: load with and without a config override, unload, and
// the errors; and the logging API.
func TestTritonExplicitControl(t *testing.T) {
	repo := t.TempDir()
	zootest.RepoModel(t, zooDir, repo, "digits", zootest.TritonDigits, "digits", "model.pt", "1")
	zootest.RepoModel(t, zooDir, repo, "other", strings.Replace(zootest.TritonDigits, `"digits"`, `"other"`, 1), "digits", "model.pt", "1")
	s := newServer(t, serverOptions{repository: repo, controlMode: lifecycle.ControlExplicit, loadModels: []string{"digits", "nope"}})
	idx := s.settled()
	if idx["digits 1"] != "READY" || idx["other"] != "" || len(idx) != 2 {
		t.Fatalf("index %v", idx)
	}
	x := digitsInput(0)
	infer := func(model string, batch int) response {
		data := make([]float32, 0, batch*len(x))
		for range batch {
			data = append(data, x...)
		}
		body, _ := json.Marshal(map[string]any{"inputs": []map[string]any{{"name": "INPUT__0", "shape": []int{batch, 1, 28, 28}, "datatype": "FP32", "data": data}}})
		return s.do("POST", "/v2/models/"+model+"/infer", body)
	}
	if r := infer("other", 1); r.status != 404 {
		t.Fatalf("a model not loaded: %d %s", r.status, r.body)
	}
	post := func(path, body string) response { return s.do("POST", path, []byte(body)) }
	if r := post("/v2/repository/models/other/load", ""); r.status != 200 {
		t.Fatalf("load: %d %s", r.status, r.body)
	}
	if r := infer("other", 1); r.status != 200 {
		t.Fatalf("a loaded model: %d %s", r.status, r.body)
	}

	// A load with a config override replaces config.pbtxt: max_batch_size 2.
	override, _ := json.Marshal(map[string]any{"parameters": map[string]string{"config": `{"platform": "pytorch_libtorch", "max_batch_size": 2,
		"input": [{"name": "INPUT__0", "data_type": "TYPE_FP32", "dims": [1, 28, 28]}],
		"output": [{"name": "OUTPUT__0", "data_type": "TYPE_FP32", "dims": [10]}], "dynamic_batching": {}}`}})
	if r := post("/v2/repository/models/digits/load", string(override)); r.status != 200 {
		t.Fatalf("load with override: %d %s", r.status, r.body)
	}
	var cfg struct {
		MaxBatchSize int `json:"max_batch_size"`
	}
	s.do("GET", "/v2/models/digits/config", nil).json(t, &cfg)
	if cfg.MaxBatchSize != 2 {
		t.Fatalf("config after the override: %+v", cfg)
	}
	if r := infer("digits", 3); r.status != 400 || !strings.Contains(string(r.body), "batch-size must be") {
		t.Fatalf("a batch above max_batch_size: %d %s", r.status, r.body)
	}
	if r := infer("digits", 2); r.status != 200 {
		t.Fatalf("a batch of max_batch_size: %d %s", r.status, r.body)
	}
	if m := s.scrape(); !strings.Contains(m, `nv_inference_request_failure{model="digits",version="1",reason="OTHER"} 1`+"\n") {
		t.Fatalf("the refused batch is no OTHER failure:\n%s", m)
	}

	// Unload: the model answers 404, its metric series are gone, the index says why.
	if r := post("/v2/repository/models/other/unload", `{"parameters": {"unload_dependents": false}}`); r.status != 200 {
		t.Fatalf("unload: %d %s", r.status, r.body)
	}
	if r := infer("other", 1); r.status != 404 {
		t.Fatalf("an unloaded model: %d %s", r.status, r.body)
	}
	if m := s.scrape(); strings.Contains(m, `model="other"`) || !strings.Contains(m, `nv_inference_count{model="digits",version="1"}`) {
		t.Fatalf("metrics after the unload:\n%s", m)
	}
	if got := s.settled()["other 1"]; got != "UNAVAILABLE: unloaded" {
		t.Fatalf("index of the unloaded model: %q", got)
	}
	// Unregistered through the TorchServe management API instead: the index says so, and the
	// repository API loads it again.
	if r := post("/v2/repository/models/other/load", ""); r.status != 200 {
		t.Fatalf("load again: %d %s", r.status, r.body)
	}
	if r := s.doMgmt("DELETE", "/models/other", nil); r.status != 200 {
		t.Fatalf("DELETE through the management API: %d %s", r.status, r.body)
	}
	if got := s.settled()["other 1"]; got != "UNAVAILABLE: unloaded through the management API" {
		t.Fatalf("index after the management API's DELETE: %q", got)
	}
	if r := post("/v2/repository/models/other/load", ""); r.status != 200 {
		t.Fatalf("load after the management API's DELETE: %d %s", r.status, r.body)
	}
	if r := infer("other", 1); r.status != 200 || s.settled()["other 1"] != "READY" {
		t.Fatalf("reloaded after the management API's DELETE: %d %s %v", r.status, r.body, s.settled())
	}

	// Errors.
	for _, c := range []struct{ path, body, want string }{
		{"/v2/repository/models/nope/load", "", "no such file"},
		{"/v2/repository/models/nope/unload", "", "not loaded"},
		{"/v2/repository/models/digits/load", `{"parameters": {"file:1/model.pt": "AAAA"}}`, "not supported"},
		{"/v2/repository/models/digits/load", `{"parameters": {"config": 7}}`, "must be a string"},
		{"/v2/repository/models/digits/load", `{"parameters": {"config": "{\"max_batch_size\": 2"}}`, "config override"},
		{"/v2/repository/models/digits/load", `{`, "malformed"},
		{"/v2/logging", `{"log_file": "/tmp/x"}`, "log_file"},
		{"/v2/logging", `{"log_verbose_level": -1}`, "log_verbose_level"},
		{"/v2/logging", `{"log_colour": true}`, "malformed"},
	} {
		r := post(c.path, c.body)
		if r.status != 400 || !strings.Contains(string(r.body), c.want) {
			t.Errorf("POST %s %s: %d %s, want 400 with %q", c.path, c.body, r.status, r.body, c.want)
		}
	}
	// A failed reload leaves the loaded version serving.
	if r := infer("digits", 1); r.status != 200 {
		t.Fatalf("digits after failed loads: %d %s", r.status, r.body)
	}

	// Logging: Triton's fields over the log level.
	var ls map[string]any
	s.do("GET", "/v2/logging", nil).json(t, &ls)
	if ls["log_info"] != true || ls["log_verbose_level"] != 0.0 || ls["log_format"] != "default" {
		t.Fatalf("log settings %v", ls)
	}
	post("/v2/logging", `{"log_verbose_level": 1}`).json(t, &ls)
	if ls["log_verbose_level"] != 1.0 {
		t.Fatalf("log settings after verbose 1: %v", ls)
	}
	post("/v2/logging", `{"log_verbose_level": 0, "log_info": false, "log_warning": false}`).json(t, &ls)
	if ls["log_info"] != false || ls["log_warning"] != false || ls["log_error"] != true {
		t.Fatalf("log settings after errors only: %v", ls)
	}
}

// Poll mode replaces 1/model.pt under a load of concurrent requests: every request is
// answered 200, and the answers switch from the old model to the new one. A config broken on
// disk leaves the model serving; a model added to the repository is loaded, and one removed
// is unloaded.
func TestTritonPollReload(t *testing.T) {
	repo := t.TempDir()
	cfg := `platform: "pytorch_libtorch" max_batch_size: 4
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 3, 224, 224 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 1000 ] } ]
dynamic_batching { max_queue_delay_microseconds: 1000 }`
	zootest.RepoModel(t, zooDir, repo, "classifier", cfg, "resnet18", "model.pt", "1")
	var log lockedBuffer
	s := newServer(t, serverOptions{repository: repo, controlMode: lifecycle.ControlPoll, pollEvery: 200 * time.Millisecond, log: &log})
	if idx := s.settled(); idx["classifier 1"] != "READY" {
		t.Fatalf("index %v", idx)
	}
	img := make([]float32, 3*224*224)
	for i := range img {
		img[i] = float32(i%97)/97 - 0.5
	}
	body, _ := json.Marshal(map[string]any{"inputs": []map[string]any{{"name": "INPUT__0", "shape": []int{1, 3, 224, 224}, "datatype": "FP32", "data": img}}})
	type answer struct {
		status int
		out    []float64
		body   string
	}
	answers := make(chan answer, 4096)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			for i := 0; i < 2000; i++ { // bounded, whatever happens
				select {
				case <-stop:
					return
				default:
				}
				r := s.do("POST", "/v2/models/classifier/infer", body)
				a := answer{status: r.status, body: string(r.body)}
				if r.status == 200 {
					var out struct {
						Outputs []struct{ Data []float64 } `json:"outputs"`
					}
					if err := json.Unmarshal(r.body, &out); err == nil && len(out.Outputs) == 1 {
						a.out = out.Outputs[0].Data
					}
				}
				answers <- a
			}
		})
	}
	var got []answer
	next := func() answer {
		select {
		case a := <-answers:
			got = append(got, a)
			return a
		case <-time.After(60 * time.Second):
			close(stop)
			t.Fatalf("no answer within 60 s\n%s", log.String())
			return answer{}
		}
	}
	first := next()
	if first.status != 200 {
		t.Fatalf("first answer: %d %s", first.status, first.body)
	}
	for range 3 {
		next()
	}
	zootest.CopyFile(t, filepath.Join(zooDir, "efficientnet_lite0", "model.pt"), filepath.Join(repo, "classifier", "1", "model.pt"))
	// Until three answers in a row come from another model.
	changed := 0
	for deadline := time.Now().Add(90 * time.Second); changed < 3; {
		if time.Now().After(deadline) {
			close(stop)
			t.Fatalf("the answers did not change within 90 s of the new model.pt\n%s", log.String())
		}
		a := next()
		if a.status == 200 && !near(a.out, first.out, 1e-3) {
			changed++
		} else {
			changed = 0
		}
	}
	close(stop)
	wg.Wait()
	close(answers)
	for a := range answers {
		got = append(got, a)
	}
	last := got[len(got)-1].out
	if near(last, first.out, 0.1) {
		t.Fatal("the new model answers as the old one")
	}
	for i, a := range got {
		if a.status != 200 {
			t.Fatalf("answer %d of %d: %d %s", i, len(got), a.status, a.body)
		}
		if !near(a.out, first.out, 1e-3) && !near(a.out, last, 1e-3) {
			t.Fatalf("answer %d is from neither model", i)
		}
	}
	t.Logf("%d answers, all 200, switched to the new model", len(got))
	if !strings.Contains(log.String(), "model reloaded") {
		t.Fatalf("no reload logged\n%s", log.String())
	}

	// A config broken on disk leaves the loaded model serving, and the index says why.
	if err := os.WriteFile(filepath.Join(repo, "classifier", "config.pbtxt"), []byte(cfg[:40]), 0o644); err != nil {
		t.Fatal(err)
	}
	coretest.WaitFor(t, "the broken config in the index", func() bool {
		return strings.Contains(s.settled()["classifier 1"], "the new one fails: config.pbtxt:")
	})
	if r := s.do("POST", "/v2/models/classifier/infer", body); r.status != 200 {
		t.Fatalf("after a broken config: %d %s", r.status, r.body)
	}

	// A model added to the repository is loaded; a model removed is unloaded.
	zootest.RepoModel(t, zooDir, repo, "digits", zootest.TritonDigits, "digits", "model.pt", "1")
	coretest.WaitFor(t, "digits ready", func() bool { return s.do("GET", "/v2/models/digits/ready", nil).status == 200 })
	if err := os.RemoveAll(filepath.Join(repo, "classifier")); err != nil {
		t.Fatal(err)
	}
	coretest.WaitFor(t, "classifier not ready", func() bool { return s.do("GET", "/v2/models/classifier/ready", nil).status == 400 })
	if got := s.settled()["classifier 1"]; !strings.Contains(got, "removed from the repository") {
		t.Fatalf("index of the removed model: %q", got)
	}
}

// A Triton repository's extensions over gRPC: the same index, load (with a config override),
// unload, statistics and log settings as REST.
func TestTritonGRPC(t *testing.T) {
	repo := t.TempDir()
	zootest.RepoModel(t, zooDir, repo, "digits", zootest.TritonDigits, "digits", "model.pt", "1")
	zootest.RepoModel(t, zooDir, repo, "other", strings.Replace(zootest.TritonDigits, `"digits"`, `"other"`, 1), "digits", "model.pt", "1")
	s := newServer(t, serverOptions{repository: repo, controlMode: lifecycle.ControlExplicit, loadModels: []string{"digits"}})
	s.settled()
	c := s.grpcClient()

	index := func() map[string]string {
		r, err := c.RepositoryIndex(callCtx(t), &pb.RepositoryIndexRequest{})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, m := range r.GetModels() {
			out[strings.TrimSuffix(m.Name+" "+m.Version, " ")] = strings.TrimSuffix(m.State+": "+m.Reason, ": ")
		}
		return out
	}
	if idx := index(); idx["digits 1"] != "READY" || idx["other"] != "" {
		t.Fatalf("index %v", idx)
	}
	override := `{"platform": "pytorch_libtorch", "max_batch_size": 4,
		"input": [{"name": "INPUT__0", "data_type": "TYPE_FP32", "dims": [1, 28, 28]}],
		"output": [{"name": "OUTPUT__0", "data_type": "TYPE_FP32", "dims": [10]}], "dynamic_batching": {}}`
	_, err := c.RepositoryModelLoad(callCtx(t), &pb.RepositoryModelLoadRequest{ModelName: "other", Parameters: map[string]*pb.ModelRepositoryParameter{
		"config": {ParameterChoice: &pb.ModelRepositoryParameter_StringParam{StringParam: override}}}})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := c.ModelConfig(callCtx(t), &pb.ModelConfigRequest{Name: "other"})
	if err != nil || cfg.GetConfig().GetMaxBatchSize() != 4 || cfg.GetConfig().GetInput()[0].GetName() != "INPUT__0" {
		t.Fatalf("config after the override: %v %v", cfg, err)
	}
	in := &pb.ModelInferRequest{ModelName: "other", Inputs: []*pb.ModelInferRequest_InferInputTensor{{Name: "INPUT__0", Datatype: "FP32", Shape: []int64{1, 1, 28, 28},
		Contents: &pb.InferTensorContents{Fp32Contents: digitsInput(0)}}}}
	if _, err := c.ModelInfer(callCtx(t), in); err != nil {
		t.Fatal(err)
	}
	st, err := c.ModelStatistics(callCtx(t), &pb.ModelStatisticsRequest{Name: "other"})
	if err != nil || st.GetModelStats()[0].GetInferenceStats().GetSuccess().GetCount() != 1 {
		t.Fatalf("statistics %v %v", st, err)
	}
	if _, err := c.RepositoryModelUnload(callCtx(t), &pb.RepositoryModelUnloadRequest{ModelName: "other"}); err != nil {
		t.Fatal(err)
	}
	if idx := index(); idx["other 1"] != "UNAVAILABLE: unloaded" {
		t.Fatalf("index after the unload %v", idx)
	}
	_, err = c.RepositoryModelLoad(callCtx(t), &pb.RepositoryModelLoadRequest{ModelName: "nope"})
	wantCode(t, err, codes.InvalidArgument, "nope")

	// Log settings.
	ls, err := c.LogSettings(callCtx(t), &pb.LogSettingsRequest{Settings: map[string]*pb.LogSettingsRequest_SettingValue{
		"log_verbose_level": {ParameterChoice: &pb.LogSettingsRequest_SettingValue_Uint32Param{Uint32Param: 1}}}})
	if err != nil || ls.GetSettings()["log_verbose_level"].GetUint32Param() != 1 || !ls.GetSettings()["log_info"].GetBoolParam() {
		t.Fatalf("log settings %v %v", ls, err)
	}
	_, err = c.LogSettings(callCtx(t), &pb.LogSettingsRequest{Settings: map[string]*pb.LogSettingsRequest_SettingValue{
		"log_file": {ParameterChoice: &pb.LogSettingsRequest_SettingValue_StringParam{StringParam: "/tmp/x"}}}})
	wantCode(t, err, codes.InvalidArgument, "log_file")
}

// tritonPipeline is an ensemble of the digits model: the request's tensor handed to it in
// memory, its output answered under the ensemble's name.
const tritonPipeline = `
name: "pipeline"
platform: "ensemble"
max_batch_size: 8
input [ { name: "IMAGE" data_type: TYPE_FP32 dims: [ 1, 28, 28 ] } ]
output [ { name: "SCORES" data_type: TYPE_FP32 dims: [ 10 ] } ]
ensemble_scheduling {
  step [
    {
      model_name: "digits"
      model_version: -1
      input_map { key: "INPUT__0" value: "IMAGE" }
      output_map { key: "OUTPUT__0" value: "SCORES" }
    }
  ]
}
`

// A repository whose ensemble chains a TorchScript model: READY
// beside its model, loaded whichever loads first, and answering as the model does alone,
// over the v2 REST API; an ensemble naming a model the repository lacks is UNAVAILABLE
// with the model named.
func TestTritonEnsemble(t *testing.T) {
	repo := t.TempDir()
	zootest.RepoModel(t, zooDir, repo, "digits", zootest.TritonDigits, "digits", "model.pt", "1")
	broken := strings.NewReplacer(`name: "pipeline"`, `name: "broken"`, `model_name: "digits"`, `model_name: "absent"`).Replace(tritonPipeline)
	for name, config := range map[string]string{"pipeline": tritonPipeline, "broken": broken} {
		dir := filepath.Join(repo, name)
		if err := os.MkdirAll(filepath.Join(dir, "1"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "config.pbtxt"), []byte(config), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s := newServer(t, serverOptions{repository: repo, controlMode: lifecycle.ControlNone})
	idx := s.settled()
	if idx["pipeline 1"] != "READY" || idx["digits 1"] != "READY" {
		t.Fatalf("index %v", idx)
	}
	if got := idx["broken 1"] + idx["broken"]; !strings.Contains(got, "UNAVAILABLE") || !strings.Contains(got, "absent") {
		t.Errorf("an ensemble of a missing model: %q, want UNAVAILABLE naming it", got)
	}
	x := digitsInput(3)
	infer := func(model, input, output string) []float64 {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"inputs": []map[string]any{{"name": input, "shape": []int{1, 1, 28, 28}, "datatype": "FP32", "data": x}}})
		r := s.do("POST", "/v2/models/"+model+"/infer", body)
		if r.status != 200 {
			t.Fatalf("%s: %d %s", model, r.status, r.body)
		}
		var out struct {
			Outputs []struct {
				Name string
				Data []float64
			}
		}
		r.json(t, &out)
		if len(out.Outputs) != 1 || out.Outputs[0].Name != output {
			t.Fatalf("%s: outputs %s, want %s", model, r.body, output)
		}
		return out.Outputs[0].Data
	}
	alone, chained := infer("digits", "INPUT__0", "OUTPUT__0"), infer("pipeline", "IMAGE", "SCORES")
	if !near(alone, chained, 1e-6) {
		t.Errorf("the ensemble answers %v, its model alone %v", chained, alone)
	}
	var meta struct{ Platform string }
	s.do("GET", "/v2/models/pipeline", nil).json(t, &meta)
	if meta.Platform != "ensemble" {
		t.Errorf("metadata platform %q, want ensemble", meta.Platform)
	}
}
