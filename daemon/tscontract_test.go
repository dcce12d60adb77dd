package daemon_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/torchd/torchd/archive"
)

// Parameters that TorchServe cannot parse fall back to their defaults there, and scripts
// written against it send them: torchd registers, lists and scales as TorchServe does, and
// logs a warning that names the parameter and the default.
func TestLenientParameters(t *testing.T) {
	s := startServer(t)
	m := s.mgmt

	expectStatus(t, do(t, "POST", m+"/models?url=digits.mar&batch_size=dd&max_batch_delay=junk&synchronous=true", "", nil),
		200, `Model "digits" Version: 1.0 registered with 1 initial workers`)
	// TorchServe registers a negative initial_workers with none.
	expectStatus(t, do(t, "POST", m+"/models?url=slow.mar&initial_workers=-1", "", nil),
		200, `Model "slow" Version: 1.0 registered with 0 initial workers. Use scale workers API to add workers for the model.`)
	// synchronous is Java's Boolean.parseBoolean: anything but "true" is false.
	expectStatus(t, do(t, "POST", m+"/models?url=digits_tensor.mar&synchronous=-1", "", nil), 202, "Processing worker updates...")
	expectStatus(t, do(t, "POST", m+"/models?url=v2/digits.mar&synchronous=Nan", "", nil), 202, "Processing worker updates...")
	// Unparsable batch_size and max_batch_delay left version 1.0 with the defaults that
	// version 2.0, registered without them, has.
	var desc []map[string]any
	do(t, "GET", m+"/models/digits/all", "", nil).json(t, &desc)
	if len(desc) != 2 || desc[0]["batchSize"] != desc[1]["batchSize"] || desc[0]["maxBatchDelay"] != desc[1]["maxBatchDelay"] {
		t.Fatalf("defaults after unparsable batch_size and max_batch_delay: %v", desc)
	}
	// An empty url is looked up in the model store and not found; a missing one is 400.
	errorShape(t, do(t, "POST", m+"/models?url=", "", nil), 404, "ModelNotFoundException", "Model not found in model store")
	errorShape(t, do(t, "POST", m+"/models", "", nil), 400, "BadRequestException", "url is required")
	// Parsable but out of range stays 400: TorchServe has no default to fall back to there.
	errorShape(t, do(t, "POST", m+"/models?url=resnet18.mar&batch_size=0", "", nil), 400, "BadRequestException", "batch_size")

	var list struct {
		NextPageToken string `json:"nextPageToken"`
		Models        []struct {
			ModelName string `json:"modelName"`
		} `json:"models"`
	}
	for _, q := range []string{"limit=&next_page_token=", "limit=x&next_page_token=y", "limit=100&next_page_token=-1", "limit=-3"} {
		list.Models, list.NextPageToken = nil, ""
		r := do(t, "GET", m+"/models?"+q, "", nil)
		r.json(t, &list)
		if r.status != 200 || len(list.Models) != 3 || list.Models[0].ModelName != "digits" {
			t.Fatalf("list ?%s: %d %s", q, r.status, r.body)
		}
	}
	list.Models, list.NextPageToken = nil, ""
	do(t, "GET", m+"/models?limit=1&next_page_token=-1", "", nil).json(t, &list)
	if len(list.Models) != 1 || list.Models[0].ModelName != "digits" || list.NextPageToken != "1" {
		t.Fatalf("list limit=1&next_page_token=-1: %+v", list)
	}

	// min_worker=nan is the default, 1: 202 as TorchServe; -1 fails with TorchServe's 500, a
	// max_worker under min_worker with its 400, and the model keeps its workers.
	expectStatus(t, do(t, "PUT", m+"/models/slow?min_worker=nan", "", nil), 202, "Processing worker updates...")
	expectStatus(t, do(t, "PUT", m+"/models/slow?min_worker=1&max_worker=x&synchronous=TRUE", "", nil), 200, "Workers scaled to 1 for model: slow")
	errorShape(t, do(t, "PUT", m+"/models/slow?min_worker=-1", "", nil), 500, "InternalServerException", "Parameter min_worker must be an integer ≥ 0, got -1")
	errorShape(t, do(t, "PUT", m+"/models/slow?min_worker=-1&synchronous=true", "", nil), 500, "InternalServerException", "min_worker")
	errorShape(t, do(t, "PUT", m+"/models/slow?min_worker=1&max_worker=-1", "", nil), 400, "BadRequestException", "max_worker cannot be less than min_worker.")
	errorShape(t, do(t, "PUT", m+"/models/nope?min_worker=-1", "", nil), 404, "ModelNotFoundException", "nope")
	var slow []map[string]any
	do(t, "GET", m+"/models/slow", "", nil).json(t, &slow)
	if len(slow) != 1 || slow[0]["minWorkers"] != 1.0 {
		t.Fatalf("after refused scalings: %v, want minWorkers 1", slow)
	}

	log := s.Log()
	for _, p := range []string{"batch_size", "max_batch_delay", "synchronous", "limit", "next_page_token", "min_worker", "max_worker"} {
		if !strings.Contains(log, "parameter="+p) {
			t.Errorf("no warning names parameter %s", p)
		}
	}
	if !strings.Contains(log, "default=") {
		t.Errorf("the warnings do not name the default:\n%s", log)
	}
}

// startup_timeout bounds a waiting registration's load and warm-up: 0 leaves no time, and the
// registration fails with TorchServe's 500 and leaves nothing behind; -1 or one that does not
// parse is the default.
func TestStartupTimeout(t *testing.T) {
	s := startServer(t)
	m := s.mgmt
	errorShape(t, do(t, "POST", m+"/models?url=digits.mar&startup_timeout=0", "", nil), 500, "InternalServerException", "Failed to start workers for model digits version: 1.0")
	errorShape(t, do(t, "POST", m+"/models?url=digits.mar&startup_timeout=-5&initial_workers=1", "", nil), 500, "InternalServerException", "Failed to start workers")
	var list struct{ Models []struct{ ModelName string } }
	do(t, "GET", m+"/models", "", nil).json(t, &list)
	if len(list.Models) != 0 {
		t.Fatalf("a timed-out registration left %+v", list.Models)
	}
	// With no workers to start, nothing can time out.
	expectStatus(t, do(t, "POST", m+"/models?url=slow.mar&startup_timeout=0&initial_workers=0", "", nil),
		200, `Model "slow" Version: 1.0 registered with 0 initial workers. Use scale workers API to add workers for the model.`)
	expectStatus(t, do(t, "POST", m+"/models?url=digits.mar&startup_timeout=30", "", nil), 200, `Model "digits" Version: 1.0 registered with 1 initial workers`)
	expectStatus(t, do(t, "POST", m+"/models?url=digits_tensor.mar&startup_timeout=soon", "", nil), 200, `Model "digits_tensor" Version: 1.0 registered with 1 initial workers`)
	var desc []map[string]any
	do(t, "GET", m+"/models/digits", "", nil).json(t, &desc)
	if desc[0]["startupTimeout"] != 30.0 {
		t.Fatalf("startupTimeout %v, want 30", desc[0]["startupTimeout"])
	}
	do(t, "GET", m+"/models/digits_tensor", "", nil).json(t, &desc)
	if desc[0]["startupTimeout"] != 120.0 {
		t.Fatalf("startupTimeout %v, want the default 120", desc[0]["startupTimeout"])
	}
}

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

// TorchServe's management API starts no worker at registration unless asked
// (initial_workers, the archive's minWorkers, or an explicit workers setting, which is
// TorchServe's default_workers_per_model): so a registration with a handler that cannot load,
// with startup_timeout=0 or asynchronous answers 200 with 0 workers, and the scale and
// unregister calls that follow find the model. --initial-workers 1 opts into a worker at
// registration, as the other tests run (startServer).
func TestTorchServeRegistrationDefaults(t *testing.T) {
	s := startServer(t, "--initial-workers", "0")
	m := s.mgmt
	zero := func(name string) string {
		return `Model "` + name + `" Version: 1.0 registered with 0 initial workers. Use scale workers API to add workers for the model.`
	}
	expectStatus(t, do(t, "POST", m+"/models?url=digits.mar", "", nil), 200, zero("digits"))
	expectStatus(t, do(t, "POST", m+"/models?url=slow.mar&synchronous=false", "", nil), 200, zero("slow"))
	expectStatus(t, do(t, "POST", m+"/models?url=digits_tensor.mar&startup_timeout=0", "", nil), 200, zero("digits_tensor"))
	var desc []struct {
		MinWorkers int   `json:"minWorkers"`
		Workers    []any `json:"workers"`
	}
	do(t, "GET", m+"/models/digits", "", nil).json(t, &desc)
	if len(desc) != 1 || desc[0].MinWorkers != 0 || len(desc[0].Workers) != 0 {
		t.Fatalf("describe after a plain registration: %+v, want no workers", desc)
	}
	png, _ := heldOut(t)
	if r := do(t, "POST", s.inf+"/predictions/digits", "image/png", png[0]); r.status != 503 {
		t.Fatalf("a prediction with no worker: %d %s, want 503", r.status, r.body)
	}
	expectStatus(t, do(t, "PUT", m+"/models/digits?min_worker=1&synchronous=true", "", nil), 200, "Workers scaled to 1 for model: digits")
	if r := do(t, "POST", s.inf+"/predictions/digits", "image/png", png[0]); r.status != 200 {
		t.Fatalf("a prediction once scaled: %d %s", r.status, r.body)
	}
	// Asked for, a worker starts at registration.
	expectStatus(t, do(t, "POST", m+"/models?url=v2/digits.mar&initial_workers=1&synchronous=true", "", nil), 200, `Model "digits" Version: 2.0 registered with 1 initial workers`)
	expectStatus(t, do(t, "DELETE", m+"/models/slow", "", nil), 200, `Model "slow" unregistered`)

	// An explicit workers setting is TorchServe's default_workers_per_model: registrations
	// take it.
	w := startServer(t, "--initial-workers", "0", "--workers", "2")
	expectStatus(t, do(t, "POST", w.mgmt+"/models?url=digits.mar&synchronous=true", "", nil), 200, `Model "digits" Version: 1.0 registered with 2 initial workers`)
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
