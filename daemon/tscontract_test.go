package daemon_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/torchd/torchd/archive"
)

// TorchServe's frontend and model metrics through the server: Requests2XX/4XX/5XX count
// every answer of the inference and management APIs, and a real model's load, handler and
// prediction times show. The exposition's names, labels and form are frontend/metrics'
// TestTorchServeExposition.
func TestTorchServeMetrics(t *testing.T) {
	s := startServer(t)
	s.register(t, "url=digits.mar&initial_workers=1")
	png, _ := heldOut(t)
	const ok, bad = 5, 2
	for i := range ok {
		if r := do(t, "POST", s.inf+"/predictions/digits", "image/png", png[i]); r.status != 200 {
			t.Fatalf("predict: %d", r.status)
		}
	}
	for range bad {
		do(t, "POST", s.inf+"/predictions/digits", "image/png", []byte("garbage"))
	}
	// One request names its version: TorchServe labels it so, and the others "default".
	if r := do(t, "POST", s.inf+"/predictions/digits/1.0", "image/png", png[0]); r.status != 200 {
		t.Fatalf("predict 1.0: %d", r.status)
	}
	do(t, "GET", s.mgmt+"/models/nope", "", nil)                            // 404
	do(t, "POST", s.mgmt+"/models?url=slow.mar&startup_timeout=0", "", nil) // 500

	r := do(t, "GET", s.metrics+"/metrics", "", nil)
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

// The metrics port describes itself at OPTIONS /, as TorchServe's does.
func TestMetricsAPIDescription(t *testing.T) {
	s := startServer(t)
	r := do(t, "OPTIONS", s.metrics+"/", "", nil)
	var doc struct {
		OpenAPI string                    `json:"openapi"`
		Paths   map[string]map[string]any `json:"paths"`
	}
	r.json(t, &doc)
	if r.status != 200 || doc.OpenAPI != "3.0.1" || doc.Paths["/metrics"]["get"] == nil {
		t.Fatalf("OPTIONS / on the metrics port: %d %s", r.status, r.body)
	}
	errorShape(t, do(t, "GET", s.metrics+"/nope", "", nil), 404, "ResourceNotFoundException", "")
	errorShape(t, do(t, "POST", s.metrics+"/metrics", "", nil), 405, "MethodNotAllowedException", "")
}

// An archive made for TorchServe's own text_classifier (a torchtext source_vocab.pt, no
// vocab.txt) runs that handler in a handler process, whether the archive names it or the
// registration does; torchd's BERT-style handler would refuse it for want of a vocab.txt.
func TestTorchServeTextClassifierRoutes(t *testing.T) {
	dir := t.TempDir()
	vocab := filepath.Join(dir, "source_vocab.pt")
	if err := os.WriteFile(vocab, []byte("a torchtext vocabulary, read by TorchServe's handler only"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"tc_manifest", "tc_param"} {
		handler := "text_classifier"
		if name == "tc_param" {
			handler = "tensor" // the registration's handler= names text_classifier
		}
		if _, err := archive.Write(archive.WriteOptions{ModelName: name, SerializedFile: filepath.Join(zooDir, "textcls", "model.pt"),
			Handler: handler, ExtraFiles: []string{vocab}, ExportPath: dir}); err != nil {
			t.Fatal(err)
		}
	}
	s := startServer(t, "--allowed-urls", "file://.*", "--python", venvPython(t))
	for name, query := range map[string]string{"tc_manifest": "", "tc_param": "&handler=text_classifier"} {
		r := do(t, "POST", s.mgmt+"/models?initial_workers=0&url=file://"+filepath.Join(dir, name+".mar")+query, "", nil)
		if r.status != 200 {
			t.Fatalf("%s: %d %s", name, r.status, r.body)
		}
		var desc []struct{ Handler, Runtime string }
		do(t, "GET", s.mgmt+"/models/"+name, "", nil).json(t, &desc)
		if len(desc) != 1 || desc[0].Handler != "python" || desc[0].Runtime != "python" {
			t.Errorf("%s: %+v, want TorchServe's handler in a handler process", name, desc)
		}
	}
}
