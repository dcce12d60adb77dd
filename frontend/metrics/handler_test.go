package metrics

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestReadTorchServeMetricsConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.yaml", "dimensions:\n  - &m \"ModelName\"\nts_metrics:\n  counter:\n    - name: Requests2XX\n      unit: Count\nmodel_metrics:\n  counter:\n    - name: A\n      unit: count\n      dimensions: [*m]\n  histogram:\n    - name: B\n      unit: ms\n      dimensions: []\n")
	specs, err := ReadTorchServeMetricsConfig(good)
	if err != nil {
		t.Fatal(err)
	}
	if len(specs) != 2 || specs[0].Name != "A" || specs[0].Type != "counter" || strings.Join(specs[0].Dimensions, ",") != "ModelName" || specs[1].Type != "histogram" {
		t.Errorf("specs: %+v", specs)
	}
	for name, text := range map[string]string{"notyaml.yaml": "model_metrics: [", "noname.yaml": "model_metrics:\n  gauge:\n    - unit: ms\n"} {
		if _, err := ReadTorchServeMetricsConfig(write(name, text)); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v, want an error naming the file", name, err)
		}
	}
	if _, err := ReadTorchServeMetricsConfig(filepath.Join(dir, "absent.yaml")); err == nil || !strings.Contains(err.Error(), "cannot read") {
		t.Errorf("absent: %v", err)
	}
}

// Updates TorchServe drops are dropped: undeclared without auto-detection, dimensions
// other than declared, a negative counter step, torchd's own series; the rest are written
// in TorchServe's form.
func TestHandlerMetrics(t *testing.T) {
	m := New(true)
	m.SetHandlerMetrics([]HandlerMetricSpec{{Name: "C", Unit: "count", Type: "counter", Dimensions: []string{"ModelName"}}}, false)
	if !m.HandlerMetric("C", "count", "COUNTER", []string{"ModelName"}, []string{"m"}, "h", 2) ||
		!m.HandlerMetric("C", "count", "COUNTER", []string{"ModelName"}, []string{"m"}, "h", 1.5) {
		t.Fatal("a declared counter was dropped")
	}
	for _, bad := range []func() bool{
		func() bool { return m.HandlerMetric("U", "ms", "GAUGE", nil, nil, "h", 1) },
		func() bool {
			return m.HandlerMetric("C", "count", "COUNTER", []string{"ModelName", "Level"}, []string{"m", "Model"}, "h", 1)
		},
		func() bool {
			return m.HandlerMetric("C", "count", "COUNTER", []string{"ModelName"}, []string{"m"}, "h", -1)
		},
		func() bool { return m.HandlerMetric("HandlerTime", "ms", "GAUGE", nil, nil, "h", 1) },
	} {
		if bad() {
			t.Errorf("an update TorchServe drops was kept")
		}
	}
	m.SetHandlerMetrics(nil, true)
	m.HandlerMetric("G", "ms", "GAUGE", []string{"Step"}, []string{`a"b`}, "h", 3)
	m.HandlerMetric("G", "ms", "GAUGE", []string{"Step"}, []string{`a"b`}, "h", 4)
	m.HandlerMetric("H", "percent", "HISTOGRAM", nil, nil, "h", 0.3)
	if m.HandlerMetric("X", "ms", "SUMMARY", nil, nil, "h", 1) {
		t.Error("an unknown type was kept")
	}
	var b bytes.Buffer
	m.writeHandlerMetrics(&b)
	for _, want := range []string{
		"# HELP G Torchserve prometheus gauge metric with unit: ms\n# TYPE G gauge\nG{Step=\"a\\\"b\",Hostname=\"h\",} 4.0\n",
		"H_bucket{Hostname=\"h\",le=\"0.25\",} 0.0\nH_bucket{Hostname=\"h\",le=\"0.5\",} 1.0\n",
		"H_bucket{Hostname=\"h\",le=\"+Inf\",} 1.0\nH_count{Hostname=\"h\",} 1.0\nH_sum{Hostname=\"h\",} 0.3\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("no %q in\n%s", want, b.String())
		}
	}
	if strings.Contains(b.String(), "C{") {
		t.Error("SetHandlerMetrics kept the families it replaced")
	}
	// A handler that makes a series per request stops at the bound; known series go on.
	for i := range maxHandlerSeries {
		m.HandlerMetric("Many", "count", "COUNTER", []string{"Request"}, []string{strconv.Itoa(i)}, "h", 1)
	}
	if m.HandlerMetric("Many", "count", "COUNTER", []string{"Request"}, []string{"one more"}, "h", 1) {
		t.Error("a series past the bound was kept")
	}
	if !m.HandlerMetric("G", "ms", "GAUGE", []string{"Step"}, []string{`a"b`}, "h", 5) {
		t.Error("a known series was dropped at the bound")
	}
}
