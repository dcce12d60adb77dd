package daemon_test

import (
	"bytes"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// labelsMatch reports whether m carries every label in want.
func labelsMatch(m *dto.Metric, want map[string]string) bool {
	n := 0
	for _, l := range m.GetLabel() {
		if v, ok := want[l.GetName()]; ok && v == l.GetValue() {
			n++
		}
	}
	return n == len(want)
}

func findMetric(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels map[string]string) *dto.Metric {
	t.Helper()
	f, ok := fams[name]
	if !ok {
		t.Fatalf("no metric family %s", name)
	}
	for _, m := range f.GetMetric() {
		if labelsMatch(m, labels) {
			return m
		}
	}
	t.Fatalf("%s has no series with %v", name, labels)
	return nil
}

// After a known number of requests the exposition, parsed with Prometheus' own text parser,
// counts them: by status code, in the histograms, and in TorchServe's ts_* counters.
func TestMetricsExposition(t *testing.T) {
	s := startServer(t)
	s.register(t, "url=digits.mar&batch_size=4&max_batch_delay=5&initial_workers=1")
	png, _ := heldOut(t)
	const ok, bad = 12, 3
	for i := range ok {
		if r := do(t, "POST", s.inf+"/predictions/digits", "image/png", png[i]); r.status != 200 {
			t.Fatalf("predict: %d", r.status)
		}
	}
	for range bad {
		do(t, "POST", s.inf+"/predictions/digits", "image/png", []byte("garbage"))
	}
	r := do(t, "GET", s.metrics+"/metrics", "", nil)
	if r.status != 200 {
		t.Fatalf("metrics: %d", r.status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(r.body))
	if err != nil {
		t.Fatalf("exposition does not parse: %v\n%s", err, r.body)
	}
	l := map[string]string{"model": "digits", "version": "1.0"}
	if v := findMetric(t, fams, "torchd_requests_total", map[string]string{"model": "digits", "version": "1.0", "code": "200"}).GetCounter().GetValue(); v != ok {
		t.Errorf("requests with code 200: %v, want %d", v, ok)
	}
	if v := findMetric(t, fams, "torchd_requests_total", map[string]string{"model": "digits", "code": "400"}).GetCounter().GetValue(); v != bad {
		t.Errorf("requests with code 400: %v, want %d", v, bad)
	}
	for _, h := range []string{"torchd_request_seconds", "torchd_queue_seconds", "torchd_preprocess_seconds", "torchd_postprocess_seconds"} {
		m := findMetric(t, fams, h, l)
		if fams[h].GetType() != dto.MetricType_HISTOGRAM {
			t.Errorf("%s is %v, not a histogram", h, fams[h].GetType())
		}
		want := uint64(ok)
		if h == "torchd_request_seconds" || h == "torchd_preprocess_seconds" {
			want = ok + bad
		}
		if got := m.GetHistogram().GetSampleCount(); got != want {
			t.Errorf("%s count %d, want %d", h, got, want)
		}
	}
	batch := findMetric(t, fams, "torchd_batch_size", l).GetHistogram()
	if batch.GetSampleSum() != ok {
		t.Errorf("batch sizes sum to %v, want the %d requests batched", batch.GetSampleSum(), ok)
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

// A command prints only its own output: the metrics library once logged "failed init: open
// /sys/fs/cgroup/cpu.pressure" on every start where cgroup v2 has no PSI files (a container
// without them, a cgroup v1 host), as this test machine may be.
func TestCommandsPrintNoPSINoise(t *testing.T) {
	out, err := runTorchd(t, "version")
	if err != nil {
		t.Fatalf("torchd version: %v\n%s", err, out)
	}
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 1 || !strings.HasPrefix(lines[0], "torchd ") {
		t.Errorf("torchd version printed more than its line: %q", out)
	}
	if strings.Contains(out, "pressure") || strings.Contains(out, "failed init") {
		t.Errorf("torchd version: %q", out)
	}
}
