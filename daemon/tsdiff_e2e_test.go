package daemon_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"mime"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The differential test: archives made with TorchServe's torch-model-archiver, the way
// TorchServe's examples make them (daemon/testdata/tsdiff/make.py), served by TorchServe 0.12
// and by torchd, must answer alike. The archives cover a custom BaseHandler, an eager model
// with model.py under the built-in image_classifier, MNIST's example handler,
// object_detector and image_segmenter over torchvision models (eager, in a handler process, and
// scripted, in torchd's own handlers, sent photo-sized JPEGs as well), a Hugging Face sequence
// classifier, a streaming handler and an MMS module:function entry point.

// handlerPython is the handler runtime: TORCHD_PYTHON, else the project venv, which make
// test gives TorchServe, its archiver and captum (make handler-runtime).
func handlerPython(t testing.TB) string {
	p := os.Getenv("TORCHD_PYTHON")
	if p == "" {
		var err error
		if p, err = filepath.Abs("../.venv/bin/python"); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.Command(p, "-c", "import ts, model_archiver, captum").CombinedOutput(); err != nil {
		t.Fatalf("%s cannot import TorchServe, its archiver and captum (make handler-runtime): %v\n%s", p, err, out)
	}
	return p
}

// diffCase is one model's requests: each is sent to both servers, all at once, so that
// they batch.
type diffCase struct {
	model, contentType string
	bodies             [][]byte
}

// diffAnswer is one server's answer to one request.
type diffAnswer struct {
	status      int
	contentType string
	chunked     bool
	body        []byte
}

func TestTorchServeDifferential(t *testing.T) {
	py := handlerPython(t)
	if _, err := exec.LookPath("java"); err != nil {
		t.Fatal("TorchServe needs Java (make setup installs openjdk-17-jre-headless)")
	}
	dir := t.TempDir()
	mars, inputs := filepath.Join(dir, "store"), filepath.Join(dir, "inputs")
	start := time.Now()
	cmd := exec.Command(py, "testdata/tsdiff/make.py", mars, inputs)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the archives: %v\n%s", err, out)
	}
	t.Logf("archives built in %v", time.Since(start).Round(time.Second))
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(inputs, name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	images := func(prefix, ext string) [][]byte {
		return [][]byte{read(prefix + "0" + ext), read(prefix + "1" + ext), read(prefix + "2" + ext), read(prefix + "3" + ext)}
	}
	texts := func(s ...string) [][]byte {
		var out [][]byte
		for _, x := range s {
			out = append(out, []byte(x))
		}
		return out
	}
	cases := []diffCase{
		{"custom", "application/json", texts(`{"x":[1,2,3,4,5,6,7,8]}`, `{"x":[0,0,0,0,0,0,0,0]}`, `{"x":[-1,0.5,2,0,3,-2,1,1]}`, `{"x":[8,7,6,5,4,3,2,1]}`)},
		{"resnet18", "image/png", images("rgb", ".png")},
		{"mnist", "image/png", images("digit", ".png")},
		{"detector", "image/png", images("scene", ".png")},
		{"segmenter", "image/png", images("rgb", ".png")},
		// JPEGs of 720×720 to 1920×1080 with the default settings: torchd decodes them whole,
		// as PIL does in TorchServe, so the answers agree within 1e-6.
		{"resnet18_ts", "image/jpeg", images("photo", ".jpg")},
		{"segmenter_ts", "image/jpeg", images("photo", ".jpg")},
		{"hfcls", "text/plain", texts("the movie was good", "awful plot and bad actors", "a", "not very fine")},
		{"streamer", "text/plain", texts("one", "two", "three", "four")},
		{"mms", "text/plain", texts("hello", "", "abc", "the quick brown fox")},
	}
	var models []string
	for _, c := range cases {
		models = append(models, c.model)
	}
	// One thread per process on both sides: the same kernels, so that float answers agree
	// to the bit where the batch is the same, and to rounding where it is not.
	t.Setenv("OMP_NUM_THREADS", "1")

	start = time.Now()
	tsAnswers, tsBatches := func() (map[string][]diffAnswer, []int) {
		ts := startTorchServe(t, py, mars)
		defer ts.stop()
		for _, m := range models {
			waitWorkerReady(t, ts.mgmt, m, ts.exited)
		}
		t.Logf("TorchServe loaded the archives in %v", time.Since(start).Round(time.Second))
		a := askAll(t, ts.inf, cases)
		log, _ := os.ReadFile(filepath.Join(ts.dir, "logs", "model_log.log"))
		return a, batchSizes(string(log))
	}()

	start = time.Now()
	td := startServer(t, "--python", py, "--model-store", mars, "--models", "all")
	for _, m := range models {
		waitWorkerReady(t, td.mgmt, m, td.exited)
	}
	t.Logf("torchd loaded the archives in %v", time.Since(start).Round(time.Second))
	tdAnswers := askAll(t, td.inf, cases)
	tdBatches := batchSizes(td.Log())
	t.Logf("batch sizes the custom handler saw: TorchServe %v, torchd %v", tsBatches, tdBatches)
	if slices.Max(append(tdBatches, 0)) < 2 {
		t.Errorf("four concurrent requests never shared a batch in torchd (maxBatchDelay 2 s): %v", tdBatches)
	}

	for _, c := range cases {
		for i := range c.bodies {
			want, got := tsAnswers[c.model][i], tdAnswers[c.model][i]
			where := fmt.Sprintf("%s request %d", c.model, i)
			if got.status != want.status {
				t.Errorf("%s: torchd %d %s, TorchServe %d %s", where, got.status, clip(got.body), want.status, clip(want.body))
				continue
			}
			if want.contentType != "" && mediaType(got.contentType) != mediaType(want.contentType) {
				t.Errorf("%s: content type %q, TorchServe's %q", where, got.contentType, want.contentType)
			}
			if want.chunked && !got.chunked {
				t.Errorf("%s: TorchServe streamed the answer in chunks, torchd did not", where)
			}
			if err := sameAnswer(want.body, got.body); err != nil {
				t.Errorf("%s: %v\nTorchServe: %s\ntorchd:     %s", where, err, clip(want.body), clip(got.body))
			}
		}
	}
}

// askAll sends every case's requests to a server, all at once, and returns the answers by
// model, in the order of the case's bodies.
func askAll(t *testing.T, base string, cases []diffCase) map[string][]diffAnswer {
	var mu sync.Mutex
	out := map[string][]diffAnswer{}
	var wg sync.WaitGroup
	for _, c := range cases {
		out[c.model] = make([]diffAnswer, len(c.bodies))
		for i, b := range c.bodies {
			wg.Add(1)
			go func() {
				defer wg.Done()
				a, err := ask(base+"/predictions/"+c.model, c.contentType, b)
				if err != nil {
					t.Errorf("%s request %d: %v", c.model, i, err)
				}
				mu.Lock()
				out[c.model][i] = a
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	return out
}

func ask(url, contentType string, body []byte) (diffAnswer, error) {
	resp, err := httpClient.Post(url, contentType, bytes.NewReader(body))
	if err != nil {
		return diffAnswer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return diffAnswer{status: resp.StatusCode, contentType: resp.Header.Get("Content-Type"),
		chunked: slices.Contains(resp.TransferEncoding, "chunked"), body: b}, err
}

var batchRE = regexp.MustCompile(`tsdiff: custom batch of (\d+)`)

// batchSizes are the batch sizes the custom handler printed, from a server's log.
func batchSizes(log string) []int {
	var sizes []int
	for _, m := range batchRE.FindAllStringSubmatch(log, -1) {
		n, _ := strconv.Atoi(m[1])
		sizes = append(sizes, n)
	}
	return sizes
}

// sameAnswer compares two answers: as JSON, numbers within 1e-6 (relative above 1), where
// both are JSON; byte for byte otherwise.
func sameAnswer(want, got []byte) error {
	var a, b any
	if json.Unmarshal(want, &a) != nil || json.Unmarshal(got, &b) != nil {
		if !bytes.Equal(want, got) {
			return fmt.Errorf("the bodies differ")
		}
		return nil
	}
	return sameAnswerJSON(a, b, "$")
}

func sameAnswerJSON(a, b any, path string) error {
	switch x := a.(type) {
	case float64:
		y, ok := b.(float64)
		if !ok {
			return fmt.Errorf("%s: %v, want the number %v", path, b, x)
		}
		if math.Abs(x-y) > 1e-6*max(1, math.Abs(x), math.Abs(y)) {
			return fmt.Errorf("%s: %v, want %v", path, y, x)
		}
	case []any:
		y, ok := b.([]any)
		if !ok || len(y) != len(x) {
			return fmt.Errorf("%s: %s, want a list of %d", path, clip(mustJSON(b)), len(x))
		}
		for i := range x {
			if err := sameAnswerJSON(x[i], y[i], fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(y) != len(x) {
			return fmt.Errorf("%s: %s, want an object of %d keys", path, clip(mustJSON(b)), len(x))
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok {
				return fmt.Errorf("%s: no key %q", path, k)
			}
			if err := sameAnswerJSON(v, w, path+"."+k); err != nil {
				return err
			}
		}
	default:
		if a != b {
			return fmt.Errorf("%s: %v, want %v", path, b, a)
		}
	}
	return nil
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

func mediaType(ct string) string {
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return ct
	}
	return mt
}

func clip(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "…"
	}
	return string(b)
}

// waitWorkerReady polls the management API until the model's first worker is READY.
func waitWorkerReady(t *testing.T, mgmt, model string, exited <-chan struct{}) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	var last string
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			t.Fatalf("the server exited while %s loaded", model)
		default:
		}
		resp, err := http.Get(mgmt + "/models/" + model)
		if err == nil {
			var d []struct {
				Workers []struct {
					Status string `json:"status"`
				} `json:"workers"`
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			last = string(b)
			if json.Unmarshal(b, &d) == nil && len(d) == 1 && len(d[0].Workers) > 0 && d[0].Workers[0].Status == "READY" {
				return
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("%s not ready within 5 minutes: %s", model, clip([]byte(last)))
}

// torchServe is a running TorchServe, from the handler runtime's torchserve package.
type torchServe struct {
	cmd       *exec.Cmd
	dir       string // its config, logs and temporary files
	inf, mgmt string
	exited    chan struct{}
}

// startTorchServe runs TorchServe in the foreground on free ports, with every archive of
// store loaded at start, and everything it writes under a temporary directory; extra are
// more config.properties lines.
func startTorchServe(t *testing.T, py, store string, extra ...string) *torchServe {
	t.Helper()
	dir := t.TempDir()
	var ports [5]int
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = l.Addr().(*net.TCPAddr).Port
		defer l.Close()
	}
	tmp := filepath.Join(dir, "tmp")
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`inference_address=http://127.0.0.1:%d
management_address=http://127.0.0.1:%d
metrics_address=http://127.0.0.1:%d
grpc_inference_port=%d
grpc_management_port=%d
model_store=%s
load_models=all
disable_token_authorization=true
install_py_dep_per_model=false
vmargs=-Xmx1g -XX:+UseContainerSupport -Djava.io.tmpdir=%s
`, ports[0], ports[1], ports[2], ports[3], ports[4], store, tmp)
	for _, l := range extra {
		cfg += l + "\n"
	}
	if err := os.WriteFile(filepath.Join(dir, "config.properties"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	ts := &torchServe{dir: dir, exited: make(chan struct{}),
		inf: fmt.Sprintf("http://127.0.0.1:%d", ports[0]), mgmt: fmt.Sprintf("http://127.0.0.1:%d", ports[1])}
	// The torchserve console script, run by the runtime's interpreter so that its workers
	// run it too.
	ts.cmd = exec.Command(py, "-c", "import sys; sys.argv[0] = 'torchserve'; from ts.model_server import start; start()",
		"--start", "--foreground", "--ncs", "--ts-config", "config.properties", "--model-store", store, "--disable-token-auth")
	ts.cmd.Dir = dir
	ts.cmd.Env = append(os.Environ(), "TMPDIR="+tmp, "LOG_LOCATION="+filepath.Join(dir, "logs"), "METRICS_LOCATION="+filepath.Join(dir, "logs"))
	ts.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out bytes.Buffer
	ts.cmd.Stdout, ts.cmd.Stderr = &out, &out
	// The ports are free again only once this function returns: TorchServe binds them
	// seconds later, after the JVM starts.
	if err := ts.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { ts.cmd.Wait(); close(ts.exited) }()
	t.Cleanup(ts.stop)
	return ts
}

// stop kills TorchServe's process group: the JVM and its Python workers.
func (ts *torchServe) stop() {
	select {
	case <-ts.exited:
		return
	default:
	}
	syscall.Kill(-ts.cmd.Process.Pid, syscall.SIGKILL)
	<-ts.exited
}
