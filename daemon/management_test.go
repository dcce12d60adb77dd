package daemon_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
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

// What daemon/url.go and the management port's wiring decide, through the server (the API's
// answers with real models are frontend/torchserve's TestManagementServed and
// TestRegistrationFailuresServed): a registration's url is required, must stay in the model
// store or match allowed_urls, and handler= names a handler the archive must hold; pprof is
// served on the management port.
func TestRegistrationURLs(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.pt")
	os.WriteFile(bad, []byte("not TorchScript"), 0o644)
	s := startServer(t, "--allowed-urls", "file://.*")
	m := s.mgmt
	errorShape(t, do(t, "POST", m+"/models", "", nil), 400, "BadRequestException", "url is required")
	errorShape(t, do(t, "POST", m+"/models?url=absent.mar", "", nil), 404, "ModelNotFoundException", "absent.mar")
	errorShape(t, do(t, "POST", m+"/models?url=../etc/passwd", "", nil), 404, "ModelNotFoundException", "")
	errorShape(t, do(t, "POST", m+"/models?url=file://"+filepath.Join(dir, "nothing.mar"), "", nil), 400, "ModelException", "")
	// An unknown handler given at registration fails it with 500, as TorchServe's failed
	// worker start does (TestRegisterHandlerOverride).
	errorShape(t, do(t, "POST", m+"/models?url=file://"+bad+"&handler=my_handler.py", "", nil), 500, "InternalServerException", `handler "my_handler.py"`)
	// handler=python runs the archive's own Python handler; a bare file names none.
	errorShape(t, do(t, "POST", m+"/models?url=file://"+bad+"&handler=python", "", nil), 400, "ModelException", `handler "python" runs the archive's own Python handler in a handler process, and its manifest names none`)
	s2 := startServer(t)
	errorShape(t, do(t, "POST", s2.mgmt+"/models?url=http://example.invalid/m.mar", "", nil), 400, "ModelException", "not allowed")
	if r := do(t, "GET", s2.mgmt+"/debug/pprof/cmdline", "", nil); r.status != 200 {
		t.Fatalf("pprof: %d", r.status)
	}
	if r := do(t, "GET", s2.mgmt+"/debug/pprof/", "", nil); r.status != 200 || !bytes.Contains(r.body, []byte("goroutine")) {
		t.Fatalf("pprof's index: %d %.200s", r.status, r.body)
	}
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
