package daemon_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/frontend/frontendtest"
	"github.com/torchd/torchd/internal/torchdtest"
	"github.com/torchd/torchd/internal/zootest"
)

// The end-to-end tests run the real torchd binary on free ports against archives built
// from the model zoo (models/out, made by `make models`), and talk to it over HTTP.
var (
	torchdBin string
	store     string
	zooDir    = filepath.Join("..", "models", "out")
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	flag.Parse()
	// Fuzzing (-fuzz, in the coordinator and in every worker process) runs no end-to-end
	// test: skip building torchd and the model store.
	if f := flag.Lookup("test.fuzz"); f != nil && f.Value.String() != "" {
		return m.Run()
	}
	tmp, err := os.MkdirTemp("", "torchd-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(tmp)
	if torchdBin, err = torchdtest.Build("..", tmp, raceBuild); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	store = filepath.Join(tmp, "store")
	if err := buildStore(store); err != nil {
		fmt.Fprintln(os.Stderr, "building the model store (run `make models` first):", err)
		return 1
	}
	return m.Run()
}

// storeArchive is one archive of the e2e model store: model name, its models/out directory,
// its models/configs file, version, and a sub-directory of the store ("" for the root).
type storeArchive struct{ name, zoo, config, version, sub string }

// storeArchives are built into the store by TestMain. Test files for other handlers add
// theirs in an init function.
var storeArchives = []storeArchive{
	{"digits", "digits", "digits", "1.0", ""},
	{"digits", "digits", "digits", "2.0", "v2"},
	{"digits_tensor", "digits", "digits_tensor", "1.0", ""},
	{"resnet18", "resnet18", "resnet18", "1.0", ""},
	{"slow", "slow", "slow", "1.0", ""},
	{"textcls", "textcls", "textcls", "1.0", ""},
	{"captioner", "captioner", "captioner", "1.0", ""},
}

// storeExtras are files of an archive's models/out directory that only that archive carries,
// by archive name (the captioner's encoder package).
var storeExtras = map[string][]string{}

// storePackages are built like storeArchives, from the zoo's AOTInductor package (model.pt2)
// instead of its TorchScript file.
var storePackages []storeArchive

// storeONNX are built like storeArchives, from an ONNX file (model.onnx) of the zoo.
var storeONNX []storeArchive

// buildStore writes the archives with the archive package, as `make archives` does with
// `torchd archive`. Extra files are every file of models/out/<zoo> that the archive needs:
// index_to_name.json, vocabularies and sentence-transformers configs (st/).
func buildStore(dir string) error {
	serialized := map[*storeArchive]string{}
	all := make([]storeArchive, 0, len(storeArchives)+len(storePackages)+len(storeONNX))
	all = append(append(append(all, storeArchives...), storePackages...), storeONNX...)
	for i := range all {
		switch {
		case i >= len(storeArchives)+len(storePackages):
			serialized[&all[i]] = "model.onnx"
		case i >= len(storeArchives):
			serialized[&all[i]] = "model.pt2"
		default:
			serialized[&all[i]] = "model.pt"
		}
	}
	// Under -race, deflating the archives in this race-instrumented process takes a minute;
	// the servers read stored zips as they read deflated ones (make archives stores them).
	format := archive.FormatDefault
	if raceBuild {
		format = archive.FormatZipStore
	}
	for i := range all {
		a := &all[i]
		export := filepath.Join(dir, a.sub)
		if err := os.MkdirAll(export, 0o755); err != nil {
			return err
		}
		var extra []string
		for _, f := range append([]string{"index_to_name.json", "vocab.txt", "vocab.json", "st"}, storeExtras[a.name]...) {
			if p := filepath.Join(zooDir, a.zoo, f); fileExists(p) {
				extra = append(extra, p)
			}
		}
		_, err := archive.Write(archive.WriteOptions{
			ModelName: a.name, Version: a.version,
			SerializedFile: filepath.Join(zooDir, a.zoo, serialized[a]),
			ExtraFiles:     extra,
			ConfigFile:     filepath.Join("..", "models", "configs", a.config+".toml"),
			ExportPath:     export,
			Format:         format,
		})
		if err != nil {
			return fmt.Errorf("%s %s: %w", a.name, a.version, err)
		}
	}
	return nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// server is a running torchd process.
type server struct {
	*torchdtest.Process
	t                  testing.TB
	inf, mgmt, metrics string
	// The gRPC APIs' host:port: the Open Inference Protocol, TorchServe's inference and
	// management.
	grpc, grpcInf, grpcMgmt string
	tmp                     string // the server's TMPDIR
}

// tmpEntries lists what the server has in its TMPDIR, less the lock files that tell live
// processes from dead ones (sweep.go).
func (s *server) tmpEntries(t testing.TB) []string {
	entries, err := os.ReadDir(s.tmp)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".lock") {
			continue
		}
		names = append(names, e.Name())
	}
	return names
}

// startServer runs torchd serve on free ports with the e2e store and extra args, and waits
// for it to listen (and, with models, to report healthy).
func startServer(t testing.TB, args ...string) *server {
	t.Helper()
	return startServerIn(t, t.TempDir(), args...)
}

// startServerIn is startServer with the server's TMPDIR given.
func startServerIn(t testing.TB, tmp string, args ...string) *server {
	t.Helper()
	// A TMPDIR of its own shows what the server leaves behind (extracted archives).
	// The snapshot goes to a file of the test's own (a flag in args overrides it).
	// TORCHD_INITIAL_WORKERS=1 opts into a worker at registration, which most tests
	// assume; the tests of TorchServe's default (none) pass --initial-workers 0.
	s := &server{t: t, tmp: tmp}
	s.Process = torchdtest.Start(t, torchdBin, []string{"BATCH_SIZE=", "WORKERS=", "LINGER_MS=", "TMPDIR=" + s.tmp, "TORCHD_INITIAL_WORKERS=1",
		"TORCHD_SNAPSHOT_FILE=" + filepath.Join(t.TempDir(), "snapshot.json"), "TORCHD_CACHE_DIR=" + filepath.Join(t.TempDir(), "cache")},
		append(torchdtest.ServeArgs(store), args...))
	t.Cleanup(s.stop)
	a := s.Addrs
	s.inf, s.mgmt, s.metrics = "http://"+a["inference"], "http://"+a["management"], "http://"+a["metrics"]
	s.grpc, s.grpcInf, s.grpcMgmt = a["grpc"], a["grpc_inference"], a["grpc_management"]
	return s
}

func (s *server) stop() {
	defer s.checkRaces()
	s.Stop()
}

// checkRaces fails the test when the server, built with -race (raceBuild), reported a data
// race: the race detector writes its report to stderr and lets the process run on.
func (s *server) checkRaces() {
	if log := s.Log(); strings.Contains(log, "WARNING: DATA RACE") {
		s.t.Errorf("torchd reported a data race:\n%s", log[strings.Index(log, "WARNING: DATA RACE"):])
	}
}

// waitHealthy polls /ping until it answers 200.
func (s *server) waitHealthy(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get(s.inf + "/ping")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("not healthy within 60 s\n%s", s.Log())
}

// response is a finished HTTP exchange.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) json(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("status %d body %q: %v", r.status, r.body, err)
	}
}

var httpClient = &http.Client{Timeout: 120 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}

func do(t testing.TB, method, url, contentType string, body []byte) response {
	t.Helper()
	return send(t, must(t, method, url, contentType, body))
}

// must builds a request, for tests that set headers before send.
func must(t testing.TB, method, url, contentType string, body []byte) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	return req
}

func send(t testing.TB, req *http.Request) response {
	t.Helper()
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

// register registers an archive of the store synchronously and fails the test on an error.
func (s *server) register(t testing.TB, query string) {
	t.Helper()
	r := do(t, "POST", s.mgmt+"/models?"+query, "", nil)
	if r.status != 200 {
		t.Fatalf("register %s: %d %s", query, r.status, r.body)
	}
}

// errorShape asserts TorchServe's error body for status.
func errorShape(t testing.TB, r response, status int, typ, msgPart string) {
	t.Helper()
	frontendtest.ErrorShape(t, r.status, r.body, status, typ, msgPart)
}

// heldOut returns the digits held-out PNGs and their labels.
func heldOut(t testing.TB) ([][]byte, []string) { return zootest.DigitsHeldOut(t, zooDir) }

// forEach calls f(i) for every i in [0, n) from workers goroutines, so that requests arrive
// concurrently and batches form.
func forEach(n, workers int, f func(i int)) {
	var wg sync.WaitGroup
	work := make(chan int)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				f(i)
			}
		}()
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
}

// batching returns a model's dispatched batches and mean batch size, from describe.
func (s *server) batching(t testing.TB, model string) (batches int64, mean float64) {
	t.Helper()
	var desc []struct {
		Batching struct {
			Batches       int64   `json:"batches"`
			MeanBatchSize float64 `json:"meanBatchSize"`
		} `json:"batching"`
	}
	do(t, "GET", s.mgmt+"/models/"+model, "", nil).json(t, &desc)
	t.Logf("%s: batches %d, mean batch size %.2f", model, desc[0].Batching.Batches, desc[0].Batching.MeanBatchSize)
	return desc[0].Batching.Batches, desc[0].Batching.MeanBatchSize
}

// runTorchd runs the binary to completion (at most 60 s) and returns what it printed.
func runTorchd(t testing.TB, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, torchdBin, args...)
	cmd.Env = append(os.Environ(), "BATCH_SIZE=", "WORKERS=", "LINGER_MS=", "TMPDIR="+t.TempDir(),
		"TORCHD_SNAPSHOT_FILE="+filepath.Join(t.TempDir(), "snapshot.json"))
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// occupySlow keeps the slow model's only worker busy for about ms milliseconds: it sends
// that request and returns once describe shows the worker busy with it; its answer comes on
// the channel.
func (s *server) occupySlow(t testing.TB, ms int) <-chan response {
	busy := make(chan response, 1)
	go func() {
		busy <- do(t, "POST", s.inf+"/predictions/slow", "application/json", []byte(fmt.Sprintf("[[%d, 0]]", ms)))
	}()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
		if b, _ := s.queueState(t, "slow"); b {
			return busy
		}
		if time.Now().After(deadline) {
			t.Fatal("the slow request never reached the worker")
		}
	}
}

// queueState is what describe shows of model's default version: whether a worker is busy,
// and the requests pending in its queue.
func (s *server) queueState(t testing.TB, model string) (busy bool, pending int) {
	return s.queueStateWith(t, model, "")
}

// queueStateWith is queueState on a server whose management API needs key ("": none).
func (s *server) queueStateWith(t testing.TB, model, key string) (busy bool, pending int) {
	t.Helper()
	var d []struct {
		Workers []struct {
			Status string `json:"status"`
		} `json:"workers"`
		JobQueueStatus struct {
			PendingRequests int `json:"pendingRequests"`
		} `json:"jobQueueStatus"`
	}
	req := must(t, "GET", s.mgmt+"/models/"+model, "", nil)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	send(t, req).json(t, &d)
	if len(d) == 0 {
		t.Fatalf("describe %s: no version", model)
	}
	for _, w := range d[0].Workers {
		busy = busy || w.Status == "BUSY"
	}
	return busy, d[0].JobQueueStatus.PendingRequests
}
