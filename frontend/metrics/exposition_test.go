package metrics

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
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
