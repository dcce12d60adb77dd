package metrics

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"regexp"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/core/coretest"
	"github.com/torchd/torchd/frontend/frontendtest"
)

// findMetric returns name's series whose labels include want, failing t if there is none.
func findMetric(t *testing.T, fams map[string]*dto.MetricFamily, name string, want map[string]string) *dto.Metric {
	t.Helper()
	f, ok := fams[name]
	if !ok {
		t.Fatalf("no metric family %s", name)
	}
	for _, m := range f.GetMetric() {
		n := 0
		for _, l := range m.GetLabel() {
			if v, ok := want[l.GetName()]; ok && v == l.GetValue() {
				n++
			}
		}
		if n == len(want) {
			return m
		}
	}
	t.Fatalf("%s has no series with %v", name, want)
	return nil
}

// After a known number of requests through Registry.Serve (package coretest's runtime double,
// the tensor handler), GET /metrics, parsed with Prometheus' own text parser, counts them: by
// status code, in the histograms, and in TorchServe's ts_* counters.
func TestMetricsExposition(t *testing.T) {
	m := New(true)
	rt := &coretest.Runtime{}
	r := core.NewRegistry(core.Options{Defaults: coretest.Defaults, Runtimes: []core.Runtime{rt}, Metrics: m,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	t.Cleanup(r.Close)
	coretest.Add(t, r, "digits", coretest.Archive(t, "tensor", "batch_size = 4\nmax_batch_delay = 5\n"+coretest.XConfig, nil))
	tensor := func(shape []int64, xs ...float32) func(*core.ModelVersion) (core.Input, error) {
		return func(*core.ModelVersion) (core.Input, error) {
			x := coretest.Floats(shape, xs...)
			x.Name = "x"
			return core.Input{Tensor: &x}, nil
		}
	}
	const ok, bad = 12, 3
	for range ok {
		if _, err := r.Serve(&core.Request{Model: "digits", Decode: tensor([]int64{1, 2}, 1, 2)}); err != nil {
			t.Fatal(err)
		}
	}
	for range bad {
		// The handler refuses the shape: the client's error, a 400.
		if _, err := r.Serve(&core.Request{Model: "digits", Decode: tensor([]int64{1, 3}, 1, 2, 3)}); !errors.Is(err, core.ErrBadInput) {
			t.Fatalf("a bad request: %v", err)
		}
	}
	resp := frontendtest.Do(m.Routes(), frontendtest.Request{Method: "GET", URI: "/metrics"})
	if resp.Status != 200 {
		t.Fatalf("metrics: %d", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(resp.Body))
	if err != nil {
		t.Fatalf("exposition does not parse: %v\n%s", err, resp.Body)
	}
	l := map[string]string{"model": "digits", "version": "1"}
	if v := findMetric(t, fams, "torchd_requests_total", map[string]string{"model": "digits", "version": "1", "code": "200"}).GetCounter().GetValue(); v != ok {
		t.Errorf("requests with code 200: %v, want %d", v, ok)
	}
	if v := findMetric(t, fams, "torchd_requests_total", map[string]string{"model": "digits", "code": "400"}).GetCounter().GetValue(); v != bad {
		t.Errorf("requests with code 400: %v, want %d", v, bad)
	}
	for _, h := range []string{"torchd_request_seconds", "torchd_queue_seconds", "torchd_preprocess_seconds", "torchd_postprocess_seconds"} {
		s := findMetric(t, fams, h, l)
		if fams[h].GetType() != dto.MetricType_HISTOGRAM {
			t.Errorf("%s is %v, not a histogram", h, fams[h].GetType())
		}
		want := uint64(ok)
		if h == "torchd_request_seconds" || h == "torchd_preprocess_seconds" {
			want = ok + bad
		}
		if got := s.GetHistogram().GetSampleCount(); got != want {
			t.Errorf("%s count %d, want %d", h, got, want)
		}
	}
	batch := findMetric(t, fams, "torchd_batch_size", l).GetHistogram()
	if batch.GetSampleSum() != ok {
		t.Errorf("batch sizes sum to %v over %d batches, want the %d requests batched", batch.GetSampleSum(), batch.GetSampleCount(), ok)
	}
	if n := findMetric(t, fams, "torchd_inference_seconds", l).GetHistogram().GetSampleCount(); n != batch.GetSampleCount() {
		t.Errorf("%d forwards timed, %d batches", n, batch.GetSampleCount())
	}
	if v := findMetric(t, fams, "torchd_workers", l).GetGauge().GetValue(); v != 1 {
		t.Errorf("workers gauge %v", v)
	}
	if _, ok := fams["torchd_queue_depth"]; !ok {
		t.Error("no queue depth gauge")
	}
	// The requests named no version: TorchServe's series label them "default".
	ts := map[string]string{"model_name": "digits", "model_version": "default"}
	if v := findMetric(t, fams, "ts_inference_requests_total", ts).GetCounter().GetValue(); v != ok+bad {
		t.Errorf("ts_inference_requests_total %v, want %d", v, ok+bad)
	}
	for _, n := range []string{"ts_inference_latency_microseconds", "ts_queue_latency_microseconds"} {
		if v := findMetric(t, fams, n, ts).GetCounter().GetValue(); v <= 0 {
			t.Errorf("%s = %v", n, v)
		}
	}
	for _, n := range []string{"process_resident_memory_bytes", "process_cpu_seconds_total", "go_goroutines"} {
		if _, ok := fams[n]; !ok {
			t.Errorf("no process metric %s", n)
		}
	}
}

// TorchServe's frontend and model metrics, with its names and labels, in the form its Java
// client writes and its own test (test/pytest/test_metrics.py) reads: requests by the
// version they named ("default" when none), the response classes CountResponse counts, the
// host's gauges, a worker's load time and the model's handler and prediction times.
func TestTorchServeExposition(t *testing.T) {
	m := New(true)
	rt := &coretest.Runtime{}
	r := core.NewRegistry(core.Options{Defaults: coretest.Defaults, Runtimes: []core.Runtime{rt}, Metrics: m,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	t.Cleanup(r.Close)
	coretest.Add(t, r, "digits", coretest.Archive(t, "tensor", coretest.XConfig, nil))
	tensor := func(cols int) func(*core.ModelVersion) (core.Input, error) {
		return func(*core.ModelVersion) (core.Input, error) {
			x := coretest.Floats([]int64{1, int64(cols)}, make([]float32, cols)...)
			x.Name = "x"
			return core.Input{Tensor: &x}, nil
		}
	}
	const ok, bad = 5, 2
	for range ok {
		if _, err := r.Serve(&core.Request{Model: "digits", Decode: tensor(2)}); err != nil {
			t.Fatal(err)
		}
	}
	for range bad {
		r.Serve(&core.Request{Model: "digits", Decode: tensor(3)})
	}
	if _, err := r.Serve(&core.Request{Model: "digits", Version: "1", Decode: tensor(2)}); err != nil {
		t.Fatal(err)
	}
	for _, code := range []int{200, 201, 400, 404, 413, 500, 503} {
		m.CountResponse(code)
	}

	body := frontendtest.Do(m.Routes(), frontendtest.Request{Method: "GET", URI: "/metrics"}).Body
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("exposition does not parse: %v\n%s", err, body)
	}
	host := map[string]string{"Level": "Host"}
	for name, want := range map[string]float64{"Requests2XX": 2, "Requests4XX": 3, "Requests5XX": 2} {
		if v := findMetric(t, fams, name, host).GetCounter().GetValue(); v != want {
			t.Errorf("%s = %v, want %v", name, v, want)
		}
	}
	for _, name := range []string{"CPUUtilization", "MemoryUsed", "MemoryAvailable", "MemoryUtilization", "DiskUsage", "DiskAvailable", "DiskUtilization"} {
		if v := findMetric(t, fams, name, host).GetGauge().GetValue(); v < 0 || strings.HasSuffix(name, "Utilization") && v > 100 {
			t.Errorf("%s = %v", name, v)
		}
	}
	if v := findMetric(t, fams, "MemoryUsed", host).GetGauge().GetValue(); v <= 0 {
		t.Errorf("MemoryUsed = %v MB", v)
	}
	if v := findMetric(t, fams, "WorkerLoadTime", map[string]string{"WorkerName": "W-9000-digits_1", "Level": "Host"}).GetGauge().GetValue(); v < 0 {
		t.Errorf("WorkerLoadTime = %v ms", v)
	}
	// The double's load and forward take about a microsecond: these may read 0 ms, never less
	// (daemon's TestTorchServeMetrics sees a real model's).
	for _, name := range []string{"HandlerTime", "PredictionTime"} {
		if v := findMetric(t, fams, name, map[string]string{"ModelName": "digits", "Level": "Model"}).GetGauge().GetValue(); v < 0 {
			t.Errorf("%s = %v ms", name, v)
		}
	}
	for _, pat := range []string{
		`TYPE Requests2XX counter`, `Requests2XX\{Level="Host",Hostname=".+",\} \d+\.\d+`,
		`TYPE ts_inference_requests_total counter`, `ts_inference_requests_total\{model_name="digits",model_version="1",hostname=".+",\} \d+\.\d+`,
		`ts_inference_requests_total\{model_name="digits",model_version="default",hostname=".+",\} \d+\.\d+`,
		`TYPE ts_inference_latency_microseconds counter`, `ts_inference_latency_microseconds\{model_name="digits",model_version="1",hostname=".+",\} \d+\.\d+`,
		`TYPE ts_queue_latency_microseconds counter`, `ts_queue_latency_microseconds\{model_name="digits",model_version="1",hostname=".+",\} \d+\.\d+`,
		`TYPE QueueTime gauge`, `QueueTime\{Level="Host",Hostname=".+",\} \d+\.\d+`,
		`TYPE WorkerThreadTime gauge`, `WorkerThreadTime\{Level="Host",Hostname=".+",\} \d+\.\d+`,
		`TYPE WorkerLoadTime gauge`, `WorkerLoadTime\{WorkerName=".+",Level="Host",Hostname=".+",\} \d+\.\d+`,
		`TYPE CPUUtilization gauge`, `CPUUtilization\{Level="Host",Hostname=".+",\} \d+\.\d+`,
		`TYPE MemoryUsed gauge`, `MemoryUsed\{Level="Host",Hostname=".+",\} \d+\.\d+`,
		`TYPE DiskAvailable gauge`, `DiskAvailable\{Level="Host",Hostname=".+",\} \d+\.\d+`,
		`TYPE HandlerTime gauge`, `HandlerTime\{ModelName="digits",Level="Model",Hostname=".+",\} \d+\.\d+`,
		`TYPE PredictionTime gauge`, `PredictionTime\{ModelName="digits",Level="Model",Hostname=".+",\} \d+\.\d+`,
	} {
		if n := len(regexp.MustCompile(pat).FindAllIndex(body, -1)); n != 1 {
			t.Errorf("TorchServe's pattern %s matches %d times, want 1", pat, n)
		}
	}
	// TorchServe's series split by what the request named; torchd's own count the version
	// that answered.
	for version, want := range map[string]float64{"1": 1, "default": ok + bad} {
		if v := findMetric(t, fams, "ts_inference_requests_total", map[string]string{"model_name": "digits", "model_version": version}).GetCounter().GetValue(); v != want {
			t.Errorf("ts_inference_requests_total{model_version=%q} = %v, want %v", version, v, want)
		}
	}
	if v := findMetric(t, fams, "torchd_requests_total", map[string]string{"model": "digits", "version": "1", "code": "200"}).GetCounter().GetValue(); v != ok+1 {
		t.Errorf("torchd_requests_total{code=\"200\"} = %v, want every answered request (%d)", v, ok+1)
	}
}
