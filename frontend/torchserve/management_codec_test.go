package torchserve

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/core/coretest"
	"github.com/torchd/torchd/frontend/frontendtest"
)

// TorchServe's management API is tested as a codec over the same registry: registration
// opens the fake model for any url ending in .mar (as the daemon opens an archive), and the
// answers are compared with testdata/management/*.golden. What describe shows of a worker's
// process and time is the machine's, and is left out of the golden files (normalized).

// manage lets f's management API register archives.
func (f *fixture) manage(t *testing.T) {
	t.Helper()
	f.open = func(req core.RegisterRequest) (*core.ModelVersion, error) {
		name := req.Name
		if name == "" {
			name = strings.TrimSuffix(req.URL, ".mar")
		}
		return f.r.Add(name, "1", req, coretest.Archive(t, "tensor", coretest.XConfig, nil))
	}
}

func (f *fixture) mgmt(method, uri string, body []byte) frontendtest.Response {
	h := map[string]string{}
	if body != nil {
		h["Content-Type"] = "application/json"
	}
	return frontendtest.Do(f.api.ManagementRoutes(), frontendtest.Request{Method: method, URI: uri, Body: body, Header: h})
}

// normalized is a describe answer with what varies by machine and moment (a worker's start
// time, pid and memory, the threads a worker was given) set to fixed values.
func normalized(t *testing.T, r frontendtest.Response) frontendtest.Response {
	t.Helper()
	if r.Status != 200 || !bytes.HasPrefix(bytes.TrimSpace(r.Body), []byte("[")) {
		return r
	}
	var ds []map[string]any
	if err := json.Unmarshal(r.Body, &ds); err != nil {
		t.Fatalf("describe: %v\n%s", err, r.Body)
	}
	for _, d := range ds {
		if b, ok := d["batching"].(map[string]any); ok {
			b["threadsPerWorker"] = 1
		}
		ws, _ := d["workers"].([]any)
		for _, w := range ws {
			w := w.(map[string]any)
			w["startTime"], w["pid"], w["memoryUsage"] = "<start>", 0, 0
		}
	}
	b, err := json.MarshalIndent(ds, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	r.Body = b
	return r
}

// Register, list, describe, scale, set the default and unregister, with TorchServe's bodies
// and statuses, and every refusal in its error shape.
func TestManagement(t *testing.T) {
	f := newFixture(t, "")
	f.manage(t)
	steps := []struct {
		name, method, uri string
		body              []byte
	}{
		{"register", "POST", "/models?url=extra.mar&initial_workers=1&synchronous=true", nil},
		{"register_json_body", "POST", "/models", []byte(`{"url": "other.mar", "model_name": "other", "initial_workers": 1, "synchronous": true}`)},
		{"register_without_workers", "POST", "/models?url=idle.mar", nil},
		{"register_async", "POST", "/models?url=later.mar&initial_workers=1&synchronous=false", nil},
		{"register_empty_url", "POST", "/models?url=", nil},
		{"register_bad_runtime", "POST", "/models?url=x.mar&runtime=java", nil},
		{"register_bad_json", "POST", "/models", []byte(`{"url": `)},
		{"list", "GET", "/models", nil},
		{"list_page", "GET", "/models?limit=2&next_page_token=1", nil},
		{"describe", "GET", "/models/m", nil},
		{"describe_version", "GET", "/models/m/2", nil},
		{"describe_all", "GET", "/models/m/all", nil},
		{"describe_unknown", "GET", "/models/nope", nil},
		{"describe_unknown_version", "GET", "/models/m/9", nil},
		{"scale_sync", "PUT", "/models/n?min_worker=2&max_worker=2&synchronous=true", nil},
		{"scale_async", "PUT", "/models/n/1?min_worker=1", nil},
		{"scale_max_below_min", "PUT", "/models/n?min_worker=3&max_worker=1", nil},
		{"scale_negative", "PUT", "/models/n?min_worker=-1&max_worker=-1", nil},
		{"scale_unknown", "PUT", "/models/nope?min_worker=1", nil},
		{"set_default", "PUT", "/models/m/2/set-default", nil},
		{"set_default_unknown_version", "PUT", "/models/m/9/set-default", nil},
		{"unregister_default_with_others", "DELETE", "/models/m", nil},
		{"unregister_version", "DELETE", "/models/m/1", nil},
		{"unregister", "DELETE", "/models/n", nil},
		{"unregister_unknown", "DELETE", "/models/nope", nil},
		{"method_not_allowed", "PATCH", "/models/m", nil},
	}
	for i, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			r := f.mgmt(s.method, s.uri, s.body)
			frontendtest.Golden(t, fmt.Sprintf("management/%02d_%s", i, s.name), normalized(t, r))
		})
	}
}

// Describe shows an archive's preferred batch sizes, sorted, as torchd's own preferredBatchSize.
func TestDescribePreferredBatchSizes(t *testing.T) {
	f := newFixture(t, "batch_size = 8\npreferred_batch_size = [4, 2]\n")
	var ds []struct {
		BatchSize int   `json:"batchSize"`
		Preferred []int `json:"preferredBatchSize"`
	}
	r := f.mgmt("GET", "/models/m", nil)
	if err := json.Unmarshal(r.Body, &ds); err != nil || r.Status != 200 || len(ds) != 1 {
		t.Fatalf("%d %s: %v", r.Status, r.Body, err)
	}
	if ds[0].BatchSize != 8 || fmt.Sprint(ds[0].Preferred) != "[2 4]" {
		t.Fatalf("describe %s", r.Body)
	}
}
