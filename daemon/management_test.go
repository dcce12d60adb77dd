package daemon_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/torchd/torchd/archive"
)

type statusBody struct {
	Status string `json:"status"`
}

func expectStatus(t *testing.T, r response, code int, status string) {
	t.Helper()
	var b statusBody
	r.json(t, &b)
	if r.status != code || b.Status != status {
		t.Fatalf("got %d %s, want %d {\"status\": %q}", r.status, r.body, code, status)
	}
}

// Every management status code, with TorchServe's messages and JSON shapes.
func TestManagementAPI(t *testing.T) {
	s := startServer(t)
	m := s.mgmt

	expectStatus(t, do(t, "POST", m+"/models?url=digits.mar&initial_workers=1&synchronous=true", "", nil),
		200, `Model "digits" Version: 1.0 registered with 1 initial workers`)
	errorShape(t, do(t, "POST", m+"/models?url=digits.mar", "", nil), 409, "ConflictStatusException", "Model version 1.0 is already registered for model digits")
	// A second version, by a JSON body.
	expectStatus(t, do(t, "POST", m+"/models", "application/json", []byte(`{"url": "v2/digits.mar", "initial_workers": 1, "synchronous": true}`)),
		200, `Model "digits" Version: 2.0 registered with 1 initial workers`)
	expectStatus(t, do(t, "POST", m+"/models?url=slow.mar&initial_workers=0", "", nil),
		200, `Model "slow" Version: 1.0 registered with 0 initial workers. Use scale workers API to add workers for the model.`)
	expectStatus(t, do(t, "POST", m+"/models?url=digits_tensor.mar&synchronous=false", "", nil), 202, "Processing worker updates...")

	errorShape(t, do(t, "POST", m+"/models", "", nil), 400, "BadRequestException", "url is required")
	errorShape(t, do(t, "POST", m+"/models?url=absent.mar", "", nil), 404, "ModelNotFoundException", "absent.mar")
	errorShape(t, do(t, "POST", m+"/models?url=../etc/passwd", "", nil), 404, "ModelNotFoundException", "")
	errorShape(t, do(t, "POST", m+"/models?url=digits.mar&runtime=java", "", nil), 400, "BadRequestException", "Invalid RuntimeType value: java")
	errorShape(t, do(t, "POST", m+"/models?url=digits.mar&batch_size=0", "", nil), 400, "BadRequestException", "batch_size")
	errorShape(t, do(t, "POST", m+"/models", "application/json", []byte(`{"url": `)), 400, "BadRequestException", "invalid JSON")
	errorShape(t, do(t, "POST", m+"/models?url=http://example.invalid/m.mar", "", nil), 400, "ModelException", "not allowed")

	// List: sorted, default versions only, paginated.
	var list struct {
		NextPageToken string `json:"nextPageToken"`
		Models        []struct {
			ModelName string `json:"modelName"`
			ModelURL  string `json:"modelUrl"`
		} `json:"models"`
	}
	do(t, "GET", m+"/models?limit=2", "", nil).json(t, &list)
	if len(list.Models) != 2 || list.Models[0].ModelName != "digits" || list.Models[1].ModelName != "digits_tensor" || list.NextPageToken != "2" {
		t.Fatalf("list page 1: %+v", list)
	}
	list.NextPageToken = ""
	do(t, "GET", m+"/models?limit=2&next_page_token=2", "", nil).json(t, &list)
	if len(list.Models) != 1 || list.Models[0].ModelName != "slow" || list.NextPageToken != "" {
		t.Fatalf("list page 2: %+v", list)
	}

	// Describe: always an array; /all lists both versions.
	var desc []map[string]any
	do(t, "GET", m+"/models/digits/all", "", nil).json(t, &desc)
	if len(desc) != 2 || desc[0]["modelVersion"] != "1.0" || desc[1]["modelVersion"] != "2.0" {
		t.Fatalf("describe all: %v", desc)
	}
	for _, k := range []string{"modelName", "modelVersion", "modelUrl", "runtime", "minWorkers", "maxWorkers", "batchSize", "maxBatchDelay", "responseTimeout", "workers", "jobQueueStatus", "batching", "loadedAtStartup"} {
		if _, ok := desc[0][k]; !ok {
			t.Errorf("describe lacks %q", k)
		}
	}
	errorShape(t, do(t, "GET", m+"/models/nope", "", nil), 404, "ModelNotFoundException", "Model not found: nope")
	errorShape(t, do(t, "GET", m+"/models/digits/3.0", "", nil), 404, "ModelVersionNotFoundException", "3.0")

	// Scale.
	expectStatus(t, do(t, "PUT", m+"/models/digits?min_worker=2&synchronous=true", "", nil), 200, "Workers scaled to 2 for model: digits")
	expectStatus(t, do(t, "PUT", m+"/models/digits/2.0?min_worker=2&synchronous=true", "", nil), 200, "Workers scaled to 2 for model: digits, version: 2.0")
	expectStatus(t, do(t, "PUT", m+"/models/digits?min_worker=1", "", nil), 202, "Processing worker updates...")
	errorShape(t, do(t, "PUT", m+"/models/digits?min_worker=3&max_worker=2", "", nil), 400, "BadRequestException", "max_worker cannot be less than min_worker.")
	errorShape(t, do(t, "PUT", m+"/models/nope?min_worker=1", "", nil), 404, "ModelNotFoundException", "")

	// Versions: the default cannot go while another exists; set-default moves it.
	errorShape(t, do(t, "DELETE", m+"/models/digits", "", nil), 403, "", "Cannot remove default version for model digits")
	expectStatus(t, do(t, "PUT", m+"/models/digits/2.0/set-default", "", nil), 200, `Default version successfully updated for model "digits" to "2.0"`)
	errorShape(t, do(t, "PUT", m+"/models/digits/7.0/set-default", "", nil), 404, "ModelVersionNotFoundException", "")
	before := len(s.tmpEntries(t))
	expectStatus(t, do(t, "DELETE", m+"/models/digits/1.0", "", nil), 200, `Model "digits" unregistered`)
	if after := len(s.tmpEntries(t)); after != before-1 {
		t.Errorf("unregistering left its extraction directory: %d entries before, %d after", before, after)
	}
	errorShape(t, do(t, "DELETE", m+"/models/digits/1.0", "", nil), 404, "ModelVersionNotFoundException", "")
	errorShape(t, do(t, "DELETE", m+"/models/nope", "", nil), 404, "ModelNotFoundException", "")
	errorShape(t, do(t, "PATCH", m+"/models/digits", "", nil), 405, "MethodNotAllowedException", "")

	// The remaining default (2.0) still predicts.
	png, _ := heldOut(t)
	if r := do(t, "POST", s.inf+"/predictions/digits", "image/png", png[0]); r.status != 200 {
		t.Fatalf("predict after version changes: %d %s", r.status, r.body)
	}
	// pprof is served on the management port.
	if r := do(t, "GET", m+"/debug/pprof/cmdline", "", nil); r.status != 200 {
		t.Fatalf("pprof: %d", r.status)
	}
	if r := do(t, "GET", m+"/debug/pprof/", "", nil); r.status != 200 || !bytes.Contains(r.body, []byte("goroutine")) {
		t.Fatalf("pprof's index: %d %.200s", r.status, r.body)
	}
}

// Archives torchd cannot serve fail registration with a clear error and leave nothing behind;
// a model that fails to load gets LibTorch's message, and the daemon keeps serving.
func TestRegistrationFailures(t *testing.T) {
	dir := t.TempDir()
	// A TorchScript file that is not one.
	bad := filepath.Join(dir, "bad.pt")
	os.WriteFile(bad, []byte("not TorchScript"), 0o644)
	if _, err := archive.Write(archive.WriteOptions{ModelName: "broken", SerializedFile: bad, Handler: "tensor", ExportPath: dir}); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, "--allowed-urls", "file://.*")
	s.register(t, "url=digits.mar&initial_workers=1")

	errorShape(t, do(t, "POST", s.mgmt+"/models?url=file://"+filepath.Join(dir, "broken.mar"), "", nil), 500, "InternalServerException", "failed to load model broken")
	errorShape(t, do(t, "POST", s.mgmt+"/models?url=file://"+filepath.Join(dir, "nothing.mar"), "", nil), 400, "ModelException", "")
	// An unknown handler given at registration fails it with 500, as TorchServe's failed
	// worker start does (TestRegisterHandlerOverride).
	errorShape(t, do(t, "POST", s.mgmt+"/models?url=file://"+bad+"&handler=my_handler.py", "", nil), 500, "InternalServerException", `handler "my_handler.py"`)
	// handler=python runs the archive's own Python handler; a bare file names none.
	errorShape(t, do(t, "POST", s.mgmt+"/models?url=file://"+bad+"&handler=python", "", nil), 400, "ModelException", `handler "python" runs the archive's own Python handler in a handler process, and its manifest names none`)
	// A model saved with torch.save, not TorchScript, is named as such, with what to do and no
	// temporary extraction path.
	py, _ := filepath.Abs("../.venv/bin/python")
	if out, err := exec.Command(py, "-c", "import sys, torch; torch.save(torch.nn.Linear(4, 2), sys.argv[1])", filepath.Join(dir, "pickled.pt")).CombinedOutput(); err != nil {
		t.Fatalf("torch.save: %v\n%s", err, out)
	}
	if _, err := archive.Write(archive.WriteOptions{ModelName: "pickled", SerializedFile: filepath.Join(dir, "pickled.pt"), Handler: "tensor", ExportPath: dir}); err != nil {
		t.Fatal(err)
	}
	r := do(t, "POST", s.mgmt+"/models?url=file://"+filepath.Join(dir, "pickled.mar"), "", nil)
	errorShape(t, r, 500, "InternalServerException", "pickled.pt is a pickled Python object (torch.save of a model or a state dict): script it")
	if strings.Contains(string(r.body), os.TempDir()) || strings.Contains(string(r.body), "corrupted") {
		t.Errorf("a torch.save pickle: %s shows a temporary path or LibTorch's message", r.body)
	}

	var list struct{ Models []struct{ ModelName string } }
	do(t, "GET", s.mgmt+"/models", "", nil).json(t, &list)
	if len(list.Models) != 1 {
		t.Fatalf("failed registrations left models behind: %+v", list)
	}
	var ping statusBody
	do(t, "GET", s.inf+"/ping", "", nil).json(t, &ping)
	if ping.Status != "Healthy" {
		t.Fatalf("ping after failed registrations: %s", ping.Status)
	}
}

// Models named at start-up load in parallel and /ping turns healthy only once they are warm.
func TestStartupModels(t *testing.T) {
	s := startServer(t, "--models", "digits=digits.mar,slow=slow.mar")
	s.waitHealthy(t)
	var list struct{ Models []struct{ ModelName string } }
	do(t, "GET", s.mgmt+"/models", "", nil).json(t, &list)
	if len(list.Models) != 2 {
		t.Fatalf("start-up models: %+v", list)
	}
	var desc []struct {
		LoadedAtStartup bool `json:"loadedAtStartup"`
	}
	do(t, "GET", s.mgmt+"/models/digits", "", nil).json(t, &desc)
	if !desc[0].LoadedAtStartup {
		t.Fatal("loadedAtStartup false for a start-up model")
	}
	// A start-up model that fails keeps /ping unhealthy.
	s2 := startServer(t, "--models", "absent.mar")
	for range 100 {
		var ping statusBody
		r := do(t, "GET", s2.inf+"/ping", "", nil)
		r.json(t, &ping)
		if r.status == 500 && ping.Status == "Unhealthy" {
			return
		}
	}
	t.Fatal("ping healthy although a start-up model failed")
}

// Registration by http URL obeys allowed_urls, downloads into a temporary file that is
// removed once the archive is extracted, and reports failed downloads.
func TestRegisterByURL(t *testing.T) {
	// The server serves another directory than the model store: an archive whose name is
	// in the store is refused before any download, as TorchServe refuses it.
	remote := t.TempDir()
	b, err := os.ReadFile(filepath.Join(store, "digits.mar"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(remote, "remote_digits.mar"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(remote, "digits.mar"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	files := http.FileServer(http.Dir(remote))
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		files.ServeHTTP(w, r)
	}))
	defer srv.Close()
	s := startServer(t, "--allowed-urls", `http://127\.0\.0\.1:\d+/.*`)
	errorShape(t, do(t, "POST", s.mgmt+"/models?url="+srv.URL+"/digits.mar&initial_workers=1", "", nil), 500, "FileAlreadyExistsException", "digits.mar")
	if hits.Load() != 0 {
		t.Fatalf("%d downloads of an archive whose name is in the model store, want 0", hits.Load())
	}
	expectStatus(t, do(t, "POST", s.mgmt+"/models?url="+srv.URL+"/remote_digits.mar&initial_workers=1", "", nil),
		200, `Model "digits" Version: 1.0 registered with 1 initial workers`)
	if hits.Load() != 1 {
		t.Fatalf("%d downloads, want 1", hits.Load())
	}
	png, _ := heldOut(t)
	if r := do(t, "POST", s.inf+"/predictions/digits", "image/png", png[0]); r.status != 200 {
		t.Fatalf("predict: %d %s", r.status, r.body)
	}
	// Only the extraction directory stays; the downloaded copy is gone.
	if left := s.tmpEntries(t); len(left) != 1 {
		t.Errorf("TMPDIR holds %v, want only the extraction directory", left)
	}
	errorShape(t, do(t, "POST", s.mgmt+"/models?url="+srv.URL+"/absent.mar", "", nil), 400, "DownloadArchiveException", "Failed to download archive from")
	errorShape(t, do(t, "POST", s.mgmt+"/models?url=http://localhost:1/digits.mar", "", nil), 400, "ModelException", "not allowed")
}

// Registration by URL is size- and time-limited: an archive over max_download_size is
// refused (from its Content-Length, and while streaming when the server sends none), a
// download slower than download_timeout is cut, and nothing is left behind; path tricks
// cannot leave the model store.
func TestDownloadLimits(t *testing.T) {
	big := bytes.Repeat([]byte("x"), 4096)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/big.mar":
			w.Header().Set("Content-Length", strconv.Itoa(len(big)))
			w.Write(big)
		case "/chunked.mar": // no Content-Length: the limit applies while streaming
			for range 4 {
				w.Write(big)
				w.(http.Flusher).Flush()
			}
		case "/slow_download.mar":
			w.Header().Set("Content-Length", "50")
			for range 50 {
				w.Write([]byte("y"))
				w.(http.Flusher).Flush()
				select {
				case <-r.Context().Done():
					return
				case <-time.After(100 * time.Millisecond):
				}
			}
		}
	}))
	defer srv.Close()
	s := startServer(t, "--allowed-urls", `http://127\.0\.0\.1:\d+/.*`, "--max-download-size", "1024", "--download-timeout", "500ms")
	errorShape(t, do(t, "POST", s.mgmt+"/models?url="+srv.URL+"/big.mar", "", nil), 400, "DownloadArchiveException", "Content-Length 4096 is over max_download_size (1024 bytes)")
	errorShape(t, do(t, "POST", s.mgmt+"/models?url="+srv.URL+"/chunked.mar", "", nil), 400, "DownloadArchiveException", "larger than max_download_size (1024 bytes)")
	start := time.Now()
	errorShape(t, do(t, "POST", s.mgmt+"/models?url="+srv.URL+"/slow_download.mar", "", nil), 400, "DownloadArchiveException", "download_timeout (500ms) passed")
	t.Logf("slow download cut after %v", time.Since(start).Round(time.Millisecond))
	for _, u := range []string{"../digits.mar", "v2/../../digits.mar", "%2e%2e/digits.mar"} {
		r := do(t, "POST", s.mgmt+"/models?url="+u, "", nil)
		if r.status != 404 {
			t.Errorf("url %s: %d %s, want 404", u, r.status, r.body)
		}
	}
	if left := s.tmpEntries(t); len(left) != 0 {
		t.Errorf("failed downloads left %v behind", left)
	}
}
