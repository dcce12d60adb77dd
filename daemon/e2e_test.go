package daemon_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math"
	"mime/multipart"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/torchd/torchd/internal/tolerance"
	"github.com/torchd/torchd/internal/zootest"
)

// top1 returns the first key of a TorchServe top-k object, which is in descending order.
func top1(body []byte) string { return zootest.Top1(body) }

// Register the digits archive through the management API, send every held-out PNG through
// HTTP concurrently, and reach the accuracy Python measured.
func TestDigitsAccuracyOverHTTP(t *testing.T) {
	s := startServer(t)
	s.register(t, "url=digits.mar&batch_size=16&max_batch_delay=5&initial_workers=2&synchronous=true")
	imgs, labels := heldOut(t)
	var correct atomic.Int64
	forEach(len(imgs), 16, func(i int) {
		r := do(t, "POST", s.inf+"/predictions/digits", "image/png", imgs[i])
		if r.status != 200 {
			t.Errorf("image %d: %d %s", i, r.status, r.body)
			return
		}
		if top1(r.body) == labels[i] {
			correct.Add(1)
		}
	})
	acc := float64(correct.Load()) / float64(len(imgs))
	t.Logf("held-out accuracy through HTTP: %.4f over %d PNGs", acc, len(imgs))
	// 0.95 is the daemon issue's bar, 0.97 the handlers issue's and Python's.
	if acc < 0.97 {
		t.Fatalf("accuracy %.4f < 0.97", acc)
	}
}

// Distinct inputs sent concurrently each get their own answer: the batched responses equal
// the one-by-one responses for the same inputs, within 1e-5, and batches larger than 1 form.
func TestConcurrentResponsesMatchTheirInputs(t *testing.T) {
	s := startServer(t)
	s.register(t, "url=digits_tensor.mar&batch_size=16&max_batch_delay=20&initial_workers=1")
	// Distinct inputs: each request is a different constant image.
	n := 64
	bodies := make([][]byte, n)
	for i := range bodies {
		v := float64(i)/float64(n)*2 - 1
		row := strings.Repeat(strconv.FormatFloat(v, 'f', 6, 64)+",", 28*28)
		bodies[i] = []byte(fmt.Sprintf(`{"data": [%s], "shape": [1, 1, 28, 28]}`, strings.TrimSuffix(row, ",")))
	}
	alone := make([][]float64, n)
	for i, b := range bodies {
		alone[i] = tensorData(t, do(t, "POST", s.inf+"/predictions/digits_tensor", "application/json", b))
	}
	batched := make([][]float64, n)
	var wg sync.WaitGroup
	for i, b := range bodies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			batched[i] = tensorData(t, do(t, "POST", s.inf+"/predictions/digits_tensor", "application/json", b))
		}()
	}
	wg.Wait()
	for i := range bodies {
		if len(alone[i]) != 10 || len(batched[i]) != 10 {
			t.Fatalf("request %d: %d and %d values", i, len(alone[i]), len(batched[i]))
		}
		for k := range alone[i] {
			if math.Abs(alone[i][k]-batched[i][k]) > tolerance.Kernels {
				t.Fatalf("request %d: batched output %v differs from its one-by-one output %v", i, batched[i], alone[i])
			}
		}
		if i > 0 && alone[i][0] == alone[i-1][0] {
			t.Fatalf("requests %d and %d got identical outputs; inputs were meant to differ", i-1, i)
		}
	}
	if _, mean := s.batching(t, "digits_tensor"); mean <= 1.05 {
		t.Fatalf("no batching under concurrent load: mean batch size %.2f", mean)
	}
}

func tensorData(t testing.TB, r response) []float64 {
	t.Helper()
	if r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	var out struct {
		DType string    `json:"dtype"`
		Shape []int64   `json:"shape"`
		Data  []float64 `json:"data"`
	}
	r.json(t, &out)
	if out.DType != "float32" || len(out.Shape) != 2 || out.Shape[0] != 1 {
		t.Fatalf("tensor response %s", r.body)
	}
	return out.Data
}

var abFailed = regexp.MustCompile(`Failed requests:\s+(\d+)`)
var abComplete = regexp.MustCompile(`Complete requests:\s+(\d+)`)

// abLength is ab's count of responses whose length differs from the first one's, which it
// counts as failed: a 200 whose probabilities print to more or fewer digits (a batch's
// composition and the workers' intra-op threads move them in the last float32 bits) is one.
var abLength = regexp.MustCompile(`Failed requests:\s+\d+\s+\(Connect: \d+, Receive: \d+, Length: (\d+), Exceptions: \d+\)`)

// abRealFailures is ab's failed requests less those it counts only for their length.
func abRealFailures(out string) (int, bool) {
	m := abFailed.FindStringSubmatch(out)
	if m == nil {
		return 0, false
	}
	n, _ := strconv.Atoi(m[1])
	if l := abLength.FindStringSubmatch(out); l != nil {
		k, _ := strconv.Atoi(l[1])
		n -= k
	}
	return n, true
}

func requireAB(t *testing.T) string {
	p, err := exec.LookPath("ab")
	if err != nil {
		t.Skip("ab (apache2-utils) is not installed; `make setup` installs it")
	}
	return p
}

// Scale up and down in the middle of an ab run: no request fails.
func TestScaleDuringLoad(t *testing.T) {
	ab := requireAB(t)
	s := startServer(t)
	s.register(t, "url=digits.mar&batch_size=8&max_batch_delay=2&initial_workers=1")
	img, _ := heldOut(t)
	f := t.TempDir() + "/img.png"
	os.WriteFile(f, img[0][:], 0o644)
	cmd := exec.Command(ab, "-k", "-n", "6000", "-c", "16", "-T", "image/png", "-p", f, s.inf+"/predictions/digits")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Each scaling comes once the run has been served more requests since the last: in the
	// middle of the load, whatever the machine's speed.
	requests := func() int64 {
		var desc []struct {
			Batching struct {
				Requests int64 `json:"requests"`
			} `json:"batching"`
		}
		do(t, "GET", s.mgmt+"/models/digits", "", nil).json(t, &desc)
		return desc[0].Batching.Requests
	}
	for _, n := range []int{3, 1, 2, 0, 2} {
		from := requests()
		waitFor(t, time.Minute, "requests served under the load", func() bool { return requests() >= from+200 })
		if n == 0 {
			continue // never leave the model without workers mid-run
		}
		r := do(t, "PUT", fmt.Sprintf("%s/models/digits?min_worker=%d&synchronous=true", s.mgmt, n), "", nil)
		if r.status != 200 {
			t.Fatalf("scale to %d: %d %s", n, r.status, r.body)
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("ab: %v\n%s", err, out.String())
	}
	// Every request answered 200 (ab counts a body of another length as failed too: see
	// abLength; CI saw 35 of 6000 once).
	failed, ok := abRealFailures(out.String())
	c := abComplete.FindStringSubmatch(out.String())
	if !ok || c == nil || failed != 0 || c[1] != "6000" || strings.Contains(out.String(), "Non-2xx") {
		t.Fatalf("requests failed while scaling:\n%s", out.String())
	}
	var desc []struct {
		Workers []struct{ Status string } `json:"workers"`
	}
	do(t, "GET", s.mgmt+"/models/digits", "", nil).json(t, &desc)
	if len(desc[0].Workers) != 2 {
		t.Fatalf("workers after scaling: %d, want 2", len(desc[0].Workers))
	}
}

// A full queue answers 503 with Retry-After at once, and every accepted request is answered.
func TestQueueFull(t *testing.T) {
	s := startServer(t, "--job-queue-size", "2", "--batch-size", "1")
	s.register(t, "url=slow.mar&initial_workers=1")
	// One request occupies the worker (describe shows it busy), two fill the queue (describe
	// shows them pending); the first needs only outlast the fourth's answer.
	busy := s.occupySlow(t, 1500)
	var wg sync.WaitGroup
	accepted := make([]response, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			accepted[i] = do(t, "POST", s.inf+"/predictions/slow", "application/json", []byte(`[[1, 0]]`))
		}()
	}
	waitFor(t, time.Minute, "two requests queued", func() bool { _, n := s.queueState(t, "slow"); return n == 2 })
	start := time.Now()
	r := do(t, "POST", s.inf+"/predictions/slow", "application/json", []byte(`[[1, 0]]`))
	took := time.Since(start)
	errorShape(t, r, 503, "ServiceUnavailableException", "queue is full")
	if r.header.Get("Retry-After") == "" {
		t.Errorf("503 without Retry-After")
	}
	// The server's own time for the 503, from its access log: no decode, no queue.
	// The line is written after the answer is sent: wait for it.
	var served []string
	for deadline := time.Now().Add(5 * time.Second); served == nil && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		served = regexp.MustCompile(`path=/predictions/slow status=503 latency=(\S+)`).FindStringSubmatch(s.Log())
	}
	t.Logf("503 answered in %v at the client; the server's access log: %v", took, served)
	if served == nil {
		t.Error("no access log line for the 503")
	}
	if r := <-busy; r.status != 200 {
		t.Errorf("the request on the worker: %d %s", r.status, r.body)
	}
	wg.Wait()
	for i, a := range accepted {
		if a.status != 200 {
			t.Errorf("accepted request %d: %d %s", i, a.status, a.body)
		}
	}
}

// SIGTERM during load: every request the server accepted is answered. The server counts the
// prediction requests it handled (its access log); the clients count the responses they got.
// Eight clients open a connection per request; eight more keep theirs alive, and each of
// their requests must get a whole response: a connection may end only after a response that
// says Connection: close, or by the server's close seen before the next request is written,
// never with a reset or nothing on a request already sent.
func TestSIGTERMDropsNothing(t *testing.T) {
	s := startServer(t)
	s.register(t, "url=digits.mar&batch_size=8&max_batch_delay=5&initial_workers=1")
	imgs, _ := heldOut(t)
	var answered, failed atomic.Int64
	var closedByHeader, closedBefore atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var lost sync.Map // keep-alive client → what it got instead of a response
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if why := keepAliveClient(s.inf, imgs, g, &answered); why == "close" {
				closedByHeader.Add(1)
			} else if why == "closed before sending" {
				closedBefore.Add(1)
			} else {
				lost.Store(g, why)
			}
		}()
	}
	tr := &http.Transport{DisableKeepAlives: true}
	c := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; ; i += 8 {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := c.Post(s.inf+"/predictions/digits", "image/png", bytes.NewReader(imgs[i%len(imgs)]))
				if err != nil {
					failed.Add(1)
					continue
				}
				resp.Body.Close()
				if resp.StatusCode == 200 {
					answered.Add(1)
				}
			}
		}()
	}
	// Under load: every client has had answers.
	waitFor(t, time.Minute, "the clients answered", func() bool { return answered.Load() >= 32 })
	start := time.Now()
	s.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.Exited:
	case <-time.After(30 * time.Second):
		t.Fatal("torchd did not exit within 30 s of SIGTERM")
	}
	t.Logf("exited %v after SIGTERM", time.Since(start).Round(time.Millisecond))
	close(stop)
	wg.Wait()
	if s.ExitErr != nil {
		t.Fatalf("exit status: %v\n%s", s.ExitErr, s.Log())
	}
	if left := s.tmpEntries(t); len(left) > 0 {
		t.Errorf("extracted archives left behind after shutdown: %v", left)
	}
	handled := int64(strings.Count(s.Log(), "path=/predictions/digits status=200"))
	t.Logf("server handled %d, clients got %d answers, %d requests refused after the listener closed; keep-alive connections ended by Connection: close %d, closed before a request %d",
		handled, answered.Load(), failed.Load(), closedByHeader.Load(), closedBefore.Load())
	lost.Range(func(g, why any) bool {
		t.Errorf("keep-alive client %d: %v", g, why)
		return true
	})
	if handled == 0 || handled != answered.Load() {
		t.Fatalf("server handled %d predictions but the clients got %d answers", handled, answered.Load())
	}
}

// keepAliveClient sends predictions on one connection until it ends, counting the 200s, and
// says how it ended: "close" (a response said Connection: close), "closed before sending"
// (the server's close was there before the next request was written), or what went wrong.
func keepAliveClient(base string, imgs [][]byte, g int, answered *atomic.Int64) string {
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		return "dial: " + err.Error()
	}
	defer c.Close()
	br := bufio.NewReader(c)
	for i := g; ; i += 8 {
		if i > g {
			// Has the server closed the connection since its last response? Looked at just
			// before writing, so a close after this is a close under a request in flight.
			c.SetReadDeadline(time.Now().Add(time.Millisecond))
			_, err := br.Peek(1)
			if err == nil {
				return "bytes after a response"
			}
			if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
				return "closed before sending"
			}
			c.SetReadDeadline(time.Time{})
		}
		img := imgs[i%len(imgs)]
		req := fmt.Sprintf("POST /predictions/digits HTTP/1.1\r\nHost: torchd\r\nContent-Type: image/png\r\nContent-Length: %d\r\n\r\n", len(img))
		if _, err := c.Write(append([]byte(req), img...)); err != nil {
			return fmt.Sprintf("request %d written in part: %v", i, err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return fmt.Sprintf("request %d sent, no response: %v", i, err)
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil {
			return fmt.Sprintf("request %d: response cut short: %v", i, err)
		}
		if resp.StatusCode == 200 {
			answered.Add(1)
		}
		if resp.Close {
			return "close"
		}
	}
}

// The inference API through the server with the real image handler: PNGs alone, by version
// and two in a multipart body, the image handler's refusals, the OpenAPI document, and a body
// over max_request_size refused from its Content-Length. Every other answer of the API is a
// codec's, tested in frontend/torchserve (TestPredictions, TestPredictionErrors,
// TestPredictionServerErrors).
func TestInferenceStatusCodes(t *testing.T) {
	s := startServer(t, "--max-request-size", "200000")
	s.register(t, "url=digits.mar&initial_workers=1")
	png, _ := heldOut(t)

	var ping struct{ Status string }
	r := do(t, "GET", s.inf+"/ping", "", nil)
	r.json(t, &ping)
	if r.status != 200 || ping.Status != "Healthy" {
		t.Fatalf("ping: %d %s", r.status, r.body)
	}
	r = do(t, "POST", s.inf+"/predictions/digits", "image/png", png[0])
	if r.status != 200 || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("predict: %d %s", r.status, r.body)
	}
	var probs map[string]float64
	r.json(t, &probs)
	if len(probs) != 3 {
		t.Fatalf("top_k 3 expected: %s", r.body)
	}
	// Version in the path.
	if r := do(t, "POST", s.inf+"/predictions/digits/1.0", "image/png", png[0]); r.status != 200 {
		t.Fatalf("predict v1.0: %d %s", r.status, r.body)
	}
	// Multipart with two files: two images, a JSON array of two answers.
	var mp bytes.Buffer
	w := multipart.NewWriter(&mp)
	for i := range 2 {
		fw, _ := w.CreateFormFile("data", fmt.Sprintf("%d.png", i))
		fw.Write(png[i])
	}
	w.Close()
	r = do(t, "POST", s.inf+"/predictions/digits", w.FormDataContentType(), mp.Bytes())
	var two []map[string]float64
	r.json(t, &two)
	if r.status != 200 || len(two) != 2 {
		t.Fatalf("multipart: %d %s", r.status, r.body)
	}

	var doc struct {
		OpenAPI string                    `json:"openapi"`
		Paths   map[string]map[string]any `json:"paths"`
	}
	do(t, "OPTIONS", s.inf+"/", "", nil).json(t, &doc)
	if doc.OpenAPI != "3.0.1" || doc.Paths["/predictions/{model_name}"]["post"] == nil {
		t.Fatalf("OPTIONS / is not the OpenAPI document: %+v", doc)
	}
	errorShape(t, do(t, "GET", s.inf+"/", "", nil), 405, "MethodNotAllowedException", "")
	errorShape(t, do(t, "POST", s.inf+"/predictions/digits", "image/png", []byte("not an image")), 400, "BadRequestException", "")
	errorShape(t, do(t, "POST", s.inf+"/predictions/digits", "image/png", nil), 400, "BadRequestException", "empty")
	errorShape(t, do(t, "POST", s.inf+"/predictions/digits", "image/png", png[0][:len(png[0])/2]), 400, "BadRequestException", "")
	errorShape(t, oversized(t, s.inf+"/predictions/digits", 300000), 413, "", "max_request_size")
}

// oversized announces a body of size bytes but sends only 1 KiB of it: torchd must answer
// 413 from the Content-Length alone, without reading the body.
func oversized(t testing.TB, url string, size int) response {
	t.Helper()
	u := strings.TrimPrefix(url, "http://")
	host, path, _ := strings.Cut(u, "/")
	c, err := net.Dial("tcp", host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /%s HTTP/1.1\r\nHost: %s\r\nContent-Type: image/png\r\nContent-Length: %d\r\n\r\n", path, host, size)
	c.Write(make([]byte, 1024))
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the 413: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

// A queued request whose client disconnects never reaches the model.
func TestDisconnectedClientDropped(t *testing.T) {
	s := startServer(t, "--batch-size", "1")
	s.register(t, "url=slow.mar&initial_workers=1")
	busy := s.occupySlow(t, 800)
	// A request that is queued behind the busy worker, then abandoned.
	host := strings.TrimPrefix(s.inf, "http://")
	c, err := net.Dial("tcp", host)
	if err != nil {
		t.Fatal(err)
	}
	body := `[[1, 0]]`
	fmt.Fprintf(c, "POST /predictions/slow HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", host, len(body), body)
	waitFor(t, time.Minute, "the request queued", func() bool { _, n := s.queueState(t, "slow"); return n == 1 })
	c.Close()
	if r := <-busy; r.status != 200 {
		t.Fatalf("busy request: %d %s", r.status, r.body)
	}
	if r := do(t, "POST", s.inf+"/predictions/slow", "application/json", []byte(`[[1, 0]]`)); r.status != 200 {
		t.Fatalf("after: %d %s", r.status, r.body)
	}
	var desc []struct {
		Batching struct {
			Requests int64 `json:"requests"`
		} `json:"batching"`
	}
	do(t, "GET", s.mgmt+"/models/slow", "", nil).json(t, &desc)
	// Warm-up does not go through the batcher: the two answered requests are all it ran.
	if desc[0].Batching.Requests != 2 {
		t.Fatalf("the model ran %d requests, want 2: the abandoned one was not dropped", desc[0].Batching.Requests)
	}
}

func TestABRealFailures(t *testing.T) {
	for _, c := range []struct {
		out  string
		want int
	}{
		{"Complete requests:      6000\nFailed requests:        35\n   (Connect: 0, Receive: 0, Length: 35, Exceptions: 0)\n", 0},
		{"Failed requests:        37\n   (Connect: 1, Receive: 0, Length: 35, Exceptions: 1)\n", 2},
		{"Failed requests:        0\n", 0},
	} {
		if got, ok := abRealFailures(c.out); !ok || got != c.want {
			t.Errorf("abRealFailures(%q) = %d, %v; want %d", c.out, got, ok, c.want)
		}
	}
	if _, ok := abRealFailures("no summary"); ok {
		t.Error("no summary: ok")
	}
}
