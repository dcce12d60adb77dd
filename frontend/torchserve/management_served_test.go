package torchserve_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/torchd/torchd/archive"
)

// Every management status code with real models, with TorchServe's messages and JSON shapes.
func TestManagementServed(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp) // where archives are extracted: unregistering removes its directory
	s := serve(t, 1, []storeArchive{digitsV1, digitsV2, digitsTensorArchive, slowModel})

	expectStatus(t, s.mgmt("POST", "/models?url=digits.mar&initial_workers=1&synchronous=true", "", nil),
		200, `Model "digits" Version: 1.0 registered with 1 initial workers`)
	errorShape(t, s.mgmt("POST", "/models?url=digits.mar", "", nil), 409, "ConflictStatusException", "Model version 1.0 is already registered for model digits")
	// A second version, by a JSON body.
	expectStatus(t, s.mgmt("POST", "/models", "application/json", []byte(`{"url": "v2/digits.mar", "initial_workers": 1, "synchronous": true}`)),
		200, `Model "digits" Version: 2.0 registered with 1 initial workers`)
	expectStatus(t, s.mgmt("POST", "/models?url=slow.mar&initial_workers=0", "", nil),
		200, `Model "slow" Version: 1.0 registered with 0 initial workers. Use scale workers API to add workers for the model.`)
	expectStatus(t, s.mgmt("POST", "/models?url=digits_tensor.mar&synchronous=false", "", nil), 202, "Processing worker updates...")

	errorShape(t, s.mgmt("POST", "/models?url=digits.mar&runtime=java", "", nil), 400, "BadRequestException", "Invalid RuntimeType value: java")
	errorShape(t, s.mgmt("POST", "/models?url=digits.mar&batch_size=0", "", nil), 400, "BadRequestException", "batch_size")
	errorShape(t, s.mgmt("POST", "/models", "application/json", []byte(`{"url": `)), 400, "BadRequestException", "invalid JSON")

	// List: sorted, default versions only, paginated.
	var list struct {
		NextPageToken string `json:"nextPageToken"`
		Models        []struct {
			ModelName string `json:"modelName"`
			ModelURL  string `json:"modelUrl"`
		} `json:"models"`
	}
	s.mgmt("GET", "/models?limit=2", "", nil).json(t, &list)
	if len(list.Models) != 2 || list.Models[0].ModelName != "digits" || list.Models[1].ModelName != "digits_tensor" || list.NextPageToken != "2" {
		t.Fatalf("list page 1: %+v", list)
	}
	list.NextPageToken = ""
	s.mgmt("GET", "/models?limit=2&next_page_token=2", "", nil).json(t, &list)
	if len(list.Models) != 1 || list.Models[0].ModelName != "slow" || list.NextPageToken != "" {
		t.Fatalf("list page 2: %+v", list)
	}

	// Describe: always an array; /all lists both versions.
	var desc []map[string]any
	s.mgmt("GET", "/models/digits/all", "", nil).json(t, &desc)
	if len(desc) != 2 || desc[0]["modelVersion"] != "1.0" || desc[1]["modelVersion"] != "2.0" {
		t.Fatalf("describe all: %v", desc)
	}
	for _, k := range []string{"modelName", "modelVersion", "modelUrl", "runtime", "minWorkers", "maxWorkers", "batchSize", "maxBatchDelay", "responseTimeout", "workers", "jobQueueStatus", "batching", "loadedAtStartup"} {
		if _, ok := desc[0][k]; !ok {
			t.Errorf("describe lacks %q", k)
		}
	}
	errorShape(t, s.mgmt("GET", "/models/nope", "", nil), 404, "ModelNotFoundException", "Model not found: nope")
	errorShape(t, s.mgmt("GET", "/models/digits/3.0", "", nil), 404, "ModelVersionNotFoundException", "3.0")

	// Scale.
	expectStatus(t, s.mgmt("PUT", "/models/digits?min_worker=2&synchronous=true", "", nil), 200, "Workers scaled to 2 for model: digits")
	expectStatus(t, s.mgmt("PUT", "/models/digits/2.0?min_worker=2&synchronous=true", "", nil), 200, "Workers scaled to 2 for model: digits, version: 2.0")
	expectStatus(t, s.mgmt("PUT", "/models/digits?min_worker=1", "", nil), 202, "Processing worker updates...")
	errorShape(t, s.mgmt("PUT", "/models/digits?min_worker=3&max_worker=2", "", nil), 400, "BadRequestException", "max_worker cannot be less than min_worker.")
	errorShape(t, s.mgmt("PUT", "/models/nope?min_worker=1", "", nil), 404, "ModelNotFoundException", "")

	// Versions: the default cannot go while another exists; set-default moves it.
	errorShape(t, s.mgmt("DELETE", "/models/digits", "", nil), 403, "", "Cannot remove default version for model digits")
	expectStatus(t, s.mgmt("PUT", "/models/digits/2.0/set-default", "", nil), 200, `Default version successfully updated for model "digits" to "2.0"`)
	errorShape(t, s.mgmt("PUT", "/models/digits/7.0/set-default", "", nil), 404, "ModelVersionNotFoundException", "")
	before := entries(t, tmp)
	expectStatus(t, s.mgmt("DELETE", "/models/digits/1.0", "", nil), 200, `Model "digits" unregistered`)
	if after := entries(t, tmp); after != before-1 {
		t.Errorf("unregistering left its extraction directory: %d entries before, %d after", before, after)
	}
	errorShape(t, s.mgmt("DELETE", "/models/digits/1.0", "", nil), 404, "ModelVersionNotFoundException", "")
	errorShape(t, s.mgmt("DELETE", "/models/nope", "", nil), 404, "ModelNotFoundException", "")
	errorShape(t, s.mgmt("PATCH", "/models/digits", "", nil), 405, "MethodNotAllowedException", "")

	// The remaining default (2.0) still predicts.
	png, _ := heldOut(t)
	if r := s.inf("POST", "/predictions/digits", "image/png", png[0]); r.status != 200 {
		t.Fatalf("predict after version changes: %d %s", r.status, r.body)
	}
}

// entries counts what dir holds, less lock files.
func entries(t *testing.T, dir string) int {
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range es {
		if !strings.HasSuffix(e.Name(), ".lock") {
			n++
		}
	}
	return n
}

// Archives torchd cannot serve fail registration with a clear error and leave nothing behind;
// a model that fails to load gets LibTorch's message, and the API keeps serving.
func TestRegistrationFailuresServed(t *testing.T) {
	s := serve(t, 1, []storeArchive{digitsV1})
	// A TorchScript file that is not one.
	bad := filepath.Join(t.TempDir(), "bad.pt")
	os.WriteFile(bad, []byte("not TorchScript"), 0o644)
	if _, err := archive.Write(archive.WriteOptions{ModelName: "broken", SerializedFile: bad, Handler: "tensor", ExportPath: s.store}); err != nil {
		t.Fatal(err)
	}
	s.register(t, "url=digits.mar&initial_workers=1")
	errorShape(t, s.mgmt("POST", "/models?url=broken.mar", "", nil), 500, "InternalServerException", "failed to load model broken")
	// A model saved with torch.save, not TorchScript, is named as such, with what to do and no
	// temporary extraction path.
	py, _ := filepath.Abs("../../.venv/bin/python")
	pickled := filepath.Join(t.TempDir(), "pickled.pt")
	if out, err := exec.Command(py, "-c", "import sys, torch; torch.save(torch.nn.Linear(4, 2), sys.argv[1])", pickled).CombinedOutput(); err != nil {
		t.Fatalf("torch.save: %v\n%s", err, out)
	}
	if _, err := archive.Write(archive.WriteOptions{ModelName: "pickled", SerializedFile: pickled, Handler: "tensor", ExportPath: s.store}); err != nil {
		t.Fatal(err)
	}
	r := s.mgmt("POST", "/models?url=pickled.mar", "", nil)
	errorShape(t, r, 500, "InternalServerException", "pickled.pt is a pickled Python object (torch.save of a model or a state dict): script it")
	if strings.Contains(string(r.body), os.TempDir()) || strings.Contains(string(r.body), "corrupted") {
		t.Errorf("a torch.save pickle: %s shows a temporary path or LibTorch's message", r.body)
	}

	var list struct{ Models []struct{ ModelName string } }
	s.mgmt("GET", "/models", "", nil).json(t, &list)
	if len(list.Models) != 1 {
		t.Fatalf("failed registrations left models behind: %+v", list)
	}
	var ping struct{ Status string }
	s.inf("GET", "/ping", "", nil).json(t, &ping)
	if ping.Status != "Healthy" {
		t.Fatalf("ping after failed registrations: %s", ping.Status)
	}
}
