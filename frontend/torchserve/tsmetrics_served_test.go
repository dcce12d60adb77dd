package torchserve_test

import (
	"bytes"
	"os"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// TorchServe's frontend and model metrics: Requests2XX/4XX/5XX count every answer of the
// inference and management APIs (each answer counted as the daemon's ports count them), and a
// real model's load, handler and prediction times show. The exposition's names, labels and
// form are frontend/metrics' TestTorchServeExposition.
func TestTorchServeMetrics(t *testing.T) {
	s := serve(t, 1, []storeArchive{digitsV1, slowModel})
	counted := func(r response) response { s.metrics.CountResponse(r.status); return r }
	s.register(t, "url=digits.mar&initial_workers=1")
	s.metrics.CountResponse(200)
	png, _ := heldOut(t)
	const ok, bad = 5, 2
	for i := range ok {
		if r := counted(s.inf("POST", "/predictions/digits", "image/png", png[i])); r.status != 200 {
			t.Fatalf("predict: %d", r.status)
		}
	}
	for range bad {
		counted(s.inf("POST", "/predictions/digits", "image/png", []byte("garbage")))
	}
	// One request names its version: TorchServe labels it so, and the others "default".
	if r := counted(s.inf("POST", "/predictions/digits/1.0", "image/png", png[0])); r.status != 200 {
		t.Fatalf("predict 1.0: %d", r.status)
	}
	counted(s.mgmt("GET", "/models/nope", "", nil))                            // 404
	counted(s.mgmt("POST", "/models?url=slow.mar&startup_timeout=0", "", nil)) // 500

	r := do(s.metrics.Routes(), "GET", "/metrics", "", nil)
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(r.body))
	if err != nil {
		t.Fatalf("exposition does not parse: %v\n%s", err, r.body)
	}
	host := map[string]string{"Level": "Host"}
	for name, want := range map[string]float64{"Requests2XX": 1 + ok + 1, "Requests4XX": bad + 1, "Requests5XX": 1} {
		m := findMetric(t, fams, name, host)
		if v := m.GetCounter().GetValue(); v != want {
			t.Errorf("%s = %v, want %v", name, v, want)
		}
		if !labelsMatch(m, map[string]string{"Hostname": hostname(t)}) {
			t.Errorf("%s labels %v lack Hostname", name, m.GetLabel())
		}
	}
	if v := findMetric(t, fams, "WorkerLoadTime", map[string]string{"WorkerName": "W-9000-digits_1.0", "Level": "Host"}).GetGauge().GetValue(); v <= 0 {
		t.Errorf("WorkerLoadTime = %v ms", v)
	}
	for _, name := range []string{"HandlerTime", "PredictionTime"} {
		if v := findMetric(t, fams, name, map[string]string{"ModelName": "digits", "Level": "Model", "Hostname": hostname(t)}).GetGauge().GetValue(); v <= 0 {
			t.Errorf("%s = %v ms", name, v)
		}
	}
}

func hostname(t *testing.T) string {
	h, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// findMetric is the metric of fams with name whose labels include labels.
func findMetric(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels map[string]string) *dto.Metric {
	t.Helper()
	for _, m := range fams[name].GetMetric() {
		if labelsMatch(m, labels) {
			return m
		}
	}
	t.Fatalf("no %s%v in the exposition", name, labels)
	return nil
}

func labelsMatch(m *dto.Metric, want map[string]string) bool {
	got := map[string]string{}
	for _, l := range m.GetLabel() {
		got[l.GetName()] = l.GetValue()
	}
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}
