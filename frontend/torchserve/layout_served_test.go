package torchserve_test

import (
	"encoding/base64"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/lifecycle"
)

// What KServe's TorchServe layout (config.properties, read by daemon/tsconfig.go, whose
// parsing is its TestTorchServeConfig*) asks of the models: model_snapshot's versions load at
// start with their settings, the models key sets a version's workers and batching, and
// metrics_mode=log writes TorchServe's log form.

// mnistStore is KServe's model store: digits' archive as mnist.mar (and a second version).
func mnistStore(t *testing.T) string {
	return writeStore(t, storeArchive{"digits", "digits", "digits", "1.0", ""}, storeArchive{"digits", "digits", "digits", "2.0", "v2"})
}

// model_snapshot's version loads at start under its snapshot name with its workers and
// batching, and answers KServe v1 ({"instances": [{"data": b64}]}, as KServe's mnist.json) and
// v2 (an FP32 tensor, as its tensor_conv sample).
func TestStartupVersionsKServe(t *testing.T) {
	settings := archive.Settings{MinWorkers: archive.Fixed(1), MaxWorkers: archive.Of(5), BatchSize: archive.Fixed(2),
		MaxBatchDelay: archive.Fixed(500 * time.Millisecond), ResponseTimeout: archive.Of(60 * time.Second)}
	s := serve(t, 1, nil, options{store: mnistStore(t), startup: lifecycle.Startup{Versions: []lifecycle.StartupVersion{
		{Name: "mnist", Version: "1.0", URL: "digits.mar", Default: true, Settings: settings}}}})
	s.waitHealthy(t)
	var desc []struct {
		BatchSize, MaxBatchDelay, MinWorkers, MaxWorkers, ResponseTimeout int
	}
	s.mgmt("GET", "/models/mnist", "", nil).json(t, &desc)
	if len(desc) != 1 || desc[0].BatchSize != 2 || desc[0].MaxBatchDelay != 500 || desc[0].MinWorkers != 1 || desc[0].MaxWorkers != 5 || desc[0].ResponseTimeout != 60 {
		t.Fatalf("mnist as the snapshot describes it: %+v", desc)
	}
	pngs, labels := heldOut(t)
	for i := range 3 {
		v1, _ := json.Marshal(map[string]any{"instances": []any{map[string]string{"data": base64.StdEncoding.EncodeToString(pngs[i])}}})
		r := s.inf("POST", "/v1/models/mnist:predict", "application/json", v1)
		var p struct{ Predictions []json.RawMessage }
		r.json(t, &p)
		if r.status != 200 || len(p.Predictions) != 1 || topLabel(t, p.Predictions[0]) != labels[i] {
			t.Errorf("v1 digit %d: %d %s, want top-1 %q", i, r.status, r.body, labels[i])
		}
		r = s.inf("POST", "/v2/models/mnist/infer", "application/json", v2Body("input-0", []int{1, 28, 28}, digitsTensor(t, pngs[i])))
		var resp tsV2Response
		r.json(t, &resp)
		if r.status != 200 || resp.ModelName != "mnist" || len(resp.Outputs) != 1 || len(resp.Outputs[0].Data) != 1 || top1(resp.Outputs[0].Data[0]) != labels[i] {
			t.Errorf("v2 digit %d: %d %s, want top-1 %q", i, r.status, r.body, labels[i])
		}
	}
}

// Of two snapshot versions the default one is the model's default.
func TestStartupVersionsDefault(t *testing.T) {
	s := serve(t, 1, nil, options{store: mnistStore(t), startup: lifecycle.Startup{Versions: []lifecycle.StartupVersion{
		{Name: "mnist", Version: "1.0", URL: "digits.mar", Settings: archive.Settings{MinWorkers: archive.Fixed(1)}},
		{Name: "mnist", Version: "2.0", URL: "v2/digits.mar", Default: true, Settings: archive.Settings{MinWorkers: archive.Fixed(1)}}}}})
	s.waitHealthy(t)
	var desc []struct{ ModelVersion string }
	s.mgmt("GET", "/models/mnist", "", nil).json(t, &desc)
	if len(desc) != 1 || desc[0].ModelVersion != "2.0" {
		t.Errorf("the snapshot's defaultVersion 2.0 is not the default: %+v", desc)
	}
	pngs, labels := heldOut(t)
	if r := s.inf("POST", "/predictions/mnist", "image/png", pngs[0]); r.status != 200 || top1(r.body) != labels[0] {
		t.Fatalf("predict: %d %s", r.status, r.body)
	}
}

// A version's settings from the server's configuration (the models key) set a start-up
// model's workers and batching above the server's workers (default_workers_per_model); a
// registration through the API takes the key's batching and not its workers.
func TestPerModelSettings(t *testing.T) {
	perModel := func(name, version string, startup bool) archive.Settings {
		if name != "mnist" || version != "1.0" {
			return archive.Settings{}
		}
		s := archive.Settings{BatchSize: archive.Fixed(4), MaxBatchDelay: archive.Fixed(100 * time.Millisecond), ResponseTimeout: archive.Of(90 * time.Second)}
		if startup {
			s.MinWorkers, s.MaxWorkers = archive.Fixed(1), archive.Of(2)
		}
		return s
	}
	s := serve(t, 1, nil, options{store: mnistStore(t), server: archive.Settings{MinWorkers: archive.Fixed(3)}, perModel: perModel,
		startup: lifecycle.Startup{Models: "mnist=digits.mar"}})
	s.waitHealthy(t)
	type described struct {
		ModelVersion                                                      string
		BatchSize, MaxBatchDelay, MinWorkers, MaxWorkers, ResponseTimeout int
	}
	var desc []described
	s.mgmt("GET", "/models/mnist", "", nil).json(t, &desc)
	if want := (described{"1.0", 4, 100, 1, 2, 90}); len(desc) != 1 || desc[0] != want {
		t.Fatalf("mnist as the models key sets it: %+v, want %+v", desc, want)
	}
	pngs, labels := heldOut(t)
	if r := s.inf("POST", "/predictions/mnist", "image/png", pngs[0]); r.status != 200 || top1(r.body) != labels[0] {
		t.Fatalf("predict: %d %s", r.status, r.body)
	}
	if r := s.mgmt("DELETE", "/models/mnist/1.0", "", nil); r.status != 200 {
		t.Fatalf("unregister: %d %s", r.status, r.body)
	}
	s.register(t, "url=digits.mar&model_name=mnist&initial_workers=1&synchronous=true")
	desc = nil
	s.mgmt("GET", "/models/mnist", "", nil).json(t, &desc)
	if len(desc) != 1 || desc[0].BatchSize != 4 || desc[0].MaxBatchDelay != 100 || desc[0].ResponseTimeout != 90 || desc[0].MinWorkers != 1 || desc[0].MaxWorkers == 2 {
		t.Errorf("mnist registered through the API: %+v, want the key's batching and response timeout, and not its max workers", desc)
	}
}

// metrics_mode=log writes TorchServe's frontend metrics in TorchServe's log form, one line per
// update, beside the metrics port's (each answer counted as the daemon's ports count them).
func TestTorchServeMetricsLog(t *testing.T) {
	s := serve(t, 1, nil, options{store: mnistStore(t), startup: lifecycle.Startup{Models: "mnist=digits.mar"}})
	var log syncBuffer
	s.metrics.LogTorchServe(&log)
	s.waitHealthy(t)
	pngs, _ := heldOut(t)
	for _, path := range []string{"/predictions/mnist", "/predictions/mnist/1.0"} {
		r := s.inf("POST", path, "image/png", pngs[0])
		s.metrics.CountResponse(r.status)
		if r.status != 200 {
			t.Fatalf("%s: %d %s", path, r.status, r.body)
		}
	}
	r := s.inf("POST", "/predictions/mnist", "image/png", []byte("garbage")) // 400
	s.metrics.CountResponse(r.status)
	b := []byte(log.String())
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
		// Warm-up batches count in WorkerThreadTime.
		if n := len(line(pat).FindAll(b, -1)); n != want && !(n > want && strings.HasPrefix(pat, "WorkerThreadTime")) {
			t.Errorf("%d lines match %s, want %d; ts_metrics.log:\n%s", n, pat, want, b)
		}
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
