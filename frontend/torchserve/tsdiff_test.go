package torchserve_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/handlerproc"
	"github.com/torchd/torchd/internal/torchservetest"
	"github.com/torchd/torchd/lifecycle"
)

// The differential test: archives made with TorchServe's torch-model-archiver, the way
// TorchServe's examples make them (handlerproc/testdata/tsdiff/make.py), served by TorchServe
// 0.12 and by torchd's TorchServe API (handler processes and LibTorch, as the daemon wires
// them), must answer alike. The archives cover a custom BaseHandler, an eager model with
// model.py under the built-in image_classifier, MNIST's example handler, object_detector and
// image_segmenter over torchvision models (eager, in a handler process, and scripted, in
// torchd's own handlers, sent photo-sized JPEGs as well), a Hugging Face sequence
// classifier, a streaming handler and an MMS module:function entry point. Both servers are
// real HTTP servers: the answers' content types and chunking are compared too.

// diffClient sends the requests to both servers.
var diffClient = &http.Client{Timeout: 120 * time.Second}

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
	if raceBuild {
		t.Skip("forwards in C++ and Python, not Go's concurrency: it runs without -race (SERVED_GATES)")
	}
	py := torchservetest.Python(t, filepath.Join("..", ".."))
	dir := t.TempDir()
	mars, inputs := filepath.Join(dir, "store"), filepath.Join(dir, "inputs")
	start := time.Now()
	cmd := exec.Command(py, "../../handlerproc/testdata/tsdiff/make.py", mars, inputs)
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
		ts := torchservetest.Start(t, py, mars)
		defer ts.Stop()
		for _, m := range models {
			torchservetest.WaitWorkerReady(t, ts.Mgmt, m, ts.Exited)
		}
		t.Logf("TorchServe loaded the archives in %v", time.Since(start).Round(time.Second))
		a := askAll(t, ts.Inf, cases)
		log, _ := os.ReadFile(filepath.Join(ts.Dir, "logs", "model_log.log"))
		return a, batchSizes(string(log))
	}()

	start = time.Now()
	// torchd as `torchd serve --python py --model-store mars --models all` runs it, with
	// LibTorch's forwards on one thread as OMP_NUM_THREADS=1 gives the daemon.
	td := serve(t, 1, nil, options{store: mars, startup: lifecycle.Startup{Models: "all"},
		server:   archive.Settings{Threads: archive.Of(1)},
		runtimes: []core.Runtime{&handlerproc.Backend{Python: py}}})
	td.life.WaitStartup()
	for _, m := range models {
		td.waitWorkerReady(t, m)
	}
	t.Logf("torchd loaded the archives in %v", time.Since(start).Round(time.Second))
	// Over a connection: whether an answer is chunked is the point of the streaming case.
	tdAnswers := askAll(t, "http://"+td.listen(t), cases)
	tdBatches := batchSizes(td.log.String())
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
	resp, err := diffClient.Post(url, contentType, bytes.NewReader(body))
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

// waitWorkerReady waits until model's first worker is READY, as describe shows it.
func (s *served) waitWorkerReady(t *testing.T, model string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	var last []byte
	for time.Now().Before(deadline) {
		r := s.mgmt("GET", "/models/"+model, "", nil)
		var d []struct {
			Workers []struct {
				Status string `json:"status"`
			} `json:"workers"`
		}
		last = r.body
		if json.Unmarshal(r.body, &d) == nil && len(d) == 1 && len(d[0].Workers) > 0 && d[0].Workers[0].Status == "READY" {
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("%s not ready within 5 minutes: %s\n%s", model, clip(last), s.log.String())
}
