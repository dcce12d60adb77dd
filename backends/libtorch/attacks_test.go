package libtorch_test

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/core/coretest"
	"github.com/torchd/torchd/internal/zootest"
)

// The attacks of issue 50 through registered archives: declared shapes too large to build a
// sample of, and AOTInductor packages whose compiled library was cut short (it killed the
// process with SIGBUS) or whose entries name ../ (LibTorch wrote them outside its
// directory). docs/guide/attacks.md lists them. Each registration fails alone with its
// reason; the rest serve.

// digitsZeros is one digits_tensor request of zeros, in TorchServe's JSON tensor form.
var digitsZeros = `{"data": [` + "0" + strings.Repeat(",0", 783) + `], "shape": [1, 1, 28, 28]}`

// An archive config declaring shape = [-1, 100000, 100000, 100000] (or a product of 40 GB)
// is refused at registration with a 400 naming the key; the models registered before serve on.
func TestHugeDeclaredShape(t *testing.T) {
	s := newServer(t, 0)
	s.register(t, "url=digits_tensor.mar&initial_workers=1&synchronous=true")
	for name, shape := range map[string]string{"overflow": "[-1, 100000, 100000, 100000]", "forty_gb": "[-1, 10000, 1000, 1000]"} {
		// torchd archive refuses to write such a config: it is written over a good one.
		dir := writeDigitsArchive(t, s.scratch, "huge_"+name, "model.pt", "handler = \"tensor\"\n", nil)
		cfg := "handler = \"tensor\"\n[[inputs]]\nname = \"input__0\"\ndtype = \"float32\"\nshape = " + shape + "\n"
		if err := os.WriteFile(filepath.Join(dir, "model-config.toml"), []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		r := s.manage("POST", "/models?url=huge_"+name+"&initial_workers=1&synchronous=true")
		if r.status != 400 || !strings.Contains(string(r.body), "inputs[0].shape") || !strings.Contains(string(r.body), "holds more than the 1024 MiB a sample may") {
			t.Fatalf("%s: %d %s; want a 400 naming inputs[0].shape", name, r.status, r.body)
		}
		t.Logf("%s: %s", name, r.body)
	}
	if got := tensorData(t, s.do("POST", "/predictions/digits_tensor", "application/json", []byte(digitsZeros))); len(got) != 10 {
		t.Fatalf("digits_tensor after the refusals: %v", got)
	}
}

// packageMar writes a .mar of the package pt2 into dir and returns its name there.
func packageMar(t *testing.T, dir, name, pt2 string) string {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "model-config.toml")
	if err := os.WriteFile(cfg, []byte("handler = \"tensor\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := archive.Write(archive.WriteOptions{ModelName: name, SerializedFile: pt2, ConfigFile: cfg, ExportPath: dir, Force: true})
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Base(out)
}

// serverTemp points TMPDIR, where archives and packages are extracted, at a directory inside
// one of its own, so that an escape by one level lands in the outer one; it returns both.
func serverTemp(t *testing.T) (tmp, outer string) {
	outer = t.TempDir()
	tmp = filepath.Join(outer, "tmp")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TMPDIR", tmp)
	return tmp, outer
}

func listDir(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// A truncated compiled library and ../ entries in a registered package: each registration
// fails alone with a 500 naming the cause, nothing is written outside TMPDIR or left in it,
// and a package loaded before serves on.
func TestHostilePackages(t *testing.T) {
	s := newServer(t, 0)
	tmp, outer := serverTemp(t)
	s.register(t, "url=digits_pt2.mar&initial_workers=1&synchronous=true")
	before := listDir(t, tmp)
	prefix := ""
	cut := zootest.EditedPackage(t, zooDir, func(name string, b []byte) []byte {
		prefix, _, _ = strings.Cut(name, "/")
		if strings.HasSuffix(name, ".so") {
			return b[:20<<10] // the 20 kB
		}
		return b
	})
	deep := prefix + "/data/aotinductor/model/"
	cases := []struct {
		name, pt2, want string
	}{
		{"cut", cut, "is truncated"},
		// The .mar is extracted to TMPDIR/torchd-<pid>-model-*/ and LibTorch extracted the
		// package below TMPDIR/aotinductor_*/: five levels up is TMPDIR, six its parent.
		{"escape", zootest.EditedPackage(t, zooDir, func(_ string, b []byte) []byte { return b },
			[2]string{deep + "../../../../../escaped_tmp", "x"}, [2]string{deep + "../../../../../../escaped_outer", "x"}), "leaves the package's directory"},
		// The same with a load that would fail anyway (its library cut short).
		{"escape_failing", zootest.EditedPackage(t, zooDir, func(name string, b []byte) []byte {
			if strings.HasSuffix(name, ".so") {
				return b[:20<<10]
			}
			return b
		}, [2]string{deep + "../../../../../../escaped_failing", "x"}), "leaves the package's directory"},
	}
	for _, c := range cases {
		url := packageMar(t, s.scratch, "hostile_"+c.name, c.pt2)
		r := s.manage("POST", "/models?url="+url+"&initial_workers=1&synchronous=true")
		errorShape(t, r, 500, "InternalServerException", c.want)
		t.Logf("%s: %s", c.name, r.body)
		if got := listDir(t, outer); len(got) != 1 || got[0] != "tmp" {
			t.Fatalf("%s: TMPDIR's parent holds %v", c.name, got)
		}
		if got := listDir(t, tmp); strings.Join(got, " ") != strings.Join(before, " ") {
			t.Fatalf("%s: TMPDIR holds %v, before it held %v", c.name, got, before)
		}
	}
	if got := tensorData(t, s.do("POST", "/predictions/digits_pt2", "application/json", []byte(digitsZeros))); len(got) != 10 {
		t.Fatalf("the package loaded before: %v", got)
	}
}

// A package's extraction directory (TMPDIR/torchd-<pid>-package-*) goes when the model is
// unregistered; LibTorch makes no aotinductor_* directory of its own. (What a stopped or
// killed process leaves is the daemon's sweep: daemon's TestPackageDirsSwept.)
func TestPackageDirRemovedAtUnregister(t *testing.T) {
	s := newServer(t, 0)
	tmp, _ := serverTemp(t)
	s.register(t, "url=digits_pt2.mar&initial_workers=1&synchronous=true")
	var pkgs []string
	for _, e := range listDir(t, tmp) {
		if strings.Contains(e, "-package-") || strings.HasPrefix(e, "aotinductor_") {
			pkgs = append(pkgs, e)
		}
	}
	if len(pkgs) != 1 || !strings.HasPrefix(pkgs[0], fmt.Sprintf("torchd-%d-package-", os.Getpid())) {
		t.Fatalf("a loaded package: TMPDIR holds %v, want one torchd-<pid>-package-* directory", listDir(t, tmp))
	}
	if r := s.manage("DELETE", "/models/digits_pt2"); r.status != 200 {
		t.Fatalf("unregister: %d %s", r.status, r.body)
	}
	coretest.WaitFor(t, "the unregistered package's directory to go", func() bool { return len(listDir(t, tmp)) == 0 })
}

// zerosJSON is one 1×28×28 input for digits_tensor.
var zerosJSON = repeatJSON(repeatJSON(repeatJSON(repeatJSON("0", 28), 28), 1), 1)

// workers lists a model's workers' statuses, from describe.
func (s *server) workers(t testing.TB, model string) (statuses []string) {
	t.Helper()
	var desc []struct {
		Workers []struct {
			Status string `json:"status"`
		} `json:"workers"`
	}
	s.manage("GET", "/models/"+model).json(t, &desc)
	for _, w := range desc[0].Workers {
		statuses = append(statuses, w.Status)
	}
	return statuses
}

// A synchronous scale-down of an idle model answers: the surviving worker waiting on the
// empty queue must not hold what a stopping worker needs. A hang never answers: the call
// is given a bound that one cannot meet.
func TestScaleDownIdle(t *testing.T) {
	s := newServer(t, 0)
	s.register(t, "url=digits_tensor.mar&initial_workers=3&synchronous=true")
	for _, n := range []int{1, 3, 2, 1} {
		start := time.Now()
		done := make(chan response, 1)
		go func() {
			done <- s.manage("PUT", fmt.Sprintf("/models/digits_tensor?min_worker=%d&synchronous=true", n))
		}()
		var r response
		select {
		case r = <-done:
		case <-time.After(10 * time.Second): // generous for a loaded 2-core machine; a hang never meets it
			t.Fatalf("scale to %d with no traffic: no answer (a hang)", n)
		}
		if r.status != 200 {
			t.Fatalf("scale to %d: %d %s", n, r.status, r.body)
		}
		if got := len(s.workers(t, "digits_tensor")); got != n {
			t.Fatalf("scaled to %d, describe lists %d workers", n, got)
		}
		t.Logf("scaled to %d in %v", n, time.Since(start).Round(time.Millisecond))
	}
	// Still serves.
	if r := s.do("POST", "/predictions/digits_tensor", "application/json", []byte(zerosJSON)); r.status != 200 {
		t.Fatalf("predict after scaling: %d %s", r.status, r.body)
	}
}

// expectStatus checks a management answer: its status and its {"status": ...} message.
func expectStatus(t testing.TB, r response, status int, msg string) {
	t.Helper()
	var body struct{ Status string }
	if r.status != status || json.Unmarshal(r.body, &body) != nil || body.Status != msg {
		t.Fatalf("%d %s, want %d with status %q", r.status, r.body, status, msg)
	}
}

// modelLines returns the exposition's lines that carry a model label.
func (s *server) modelLines() []string {
	var out []string
	for _, l := range strings.Split(s.exposition(), "\n") {
		if strings.Contains(l, `model="`) || strings.Contains(l, `model_name="`) {
			out = append(out, l)
		}
	}
	return out
}

// Register, predict and unregister under 50 different names: each unregistered name keeps
// no series in any family, and the model series after the churn are exactly those before
// it. Then scale 1→3→1 five times: the stopped workers keep no series either.
func TestMetricsOfUnregisteredModels(t *testing.T) {
	s := newServer(t, 0)
	s.register(t, "url=digits_tensor.mar&initial_workers=1")
	before := len(s.modelLines())
	for i := range 50 {
		name := fmt.Sprintf("churn-%d", i)
		s.register(t, "url=digits_tensor.mar&initial_workers=1&model_name="+name)
		if r := s.do("POST", "/predictions/"+name, "application/json", []byte(zerosJSON)); r.status != 200 {
			t.Fatalf("predict %s: %d %s", name, r.status, r.body)
		}
		s.do("POST", "/predictions/"+name, "application/json", []byte("[1]")) // a 400 series too
		if n := len(s.modelLines()); n <= before {
			t.Fatalf("%s registered: %d model lines, want more than %d", name, n, before)
		}
		expectStatus(t, s.manage("DELETE", "/models/"+name), 200, fmt.Sprintf("Model %q unregistered", name))
		// Every family, whatever its label is called: model, model_name, TorchServe's
		// ModelName, and the model in a WorkerName (W-9000-churn-3_1.0).
		for _, l := range strings.Split(s.exposition(), "\n") {
			if strings.Contains(l, `"`+name+`"`) || strings.Contains(l, "-"+name+"_") {
				t.Fatalf("%s unregistered, yet /metrics has %s", name, l)
			}
		}
	}
	if after := len(s.modelLines()); after != before {
		t.Fatalf("model lines: %d before the churn, %d after", before, after)
	}
	// Scaling up and down: a stopped worker keeps no WorkerLoadTime series.
	workerLines := func() (n int) {
		for _, l := range strings.Split(s.exposition(), "\n") {
			if strings.HasPrefix(l, "WorkerLoadTime{") && strings.Contains(l, "-digits_tensor_") {
				n++
			}
		}
		return n
	}
	for i := range 5 {
		for _, w := range []string{"3", "1"} {
			expectStatus(t, s.manage("PUT", "/models/digits_tensor?synchronous=true&min_worker="+w), 200, "Workers scaled to "+w+" for model: digits_tensor")
		}
		if n := workerLines(); n != 1 {
			t.Fatalf("after %d scale cycles 1→3→1: %d WorkerLoadTime series for digits_tensor, want 1", i+1, n)
		}
	}
}

// A request of many large images whose client closes the connection as soon as it has sent
// it: the server stops decoding, never runs it, and counts it 499, not 200. Over a real
// connection: the front-end learns that the client has gone from its socket.
func TestAbandonedRequestCanceled(t *testing.T) {
	s := newServer(t, 0)
	s.register(t, "url=digits.mar&initial_workers=1&synchronous=true")
	img := pngOf(t, 4000, 4000)
	parts := make([][]byte, 20)
	for i := range parts {
		parts[i] = img
	}
	body := multipartBody("b0undary", parts...)
	c, err := net.Dial("tcp", s.listen(t))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "POST /predictions/digits HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary=b0undary\r\nContent-Length: %d\r\n\r\n", len(body))
	if _, err := c.Write(body); err != nil {
		t.Fatal(err)
	}
	c.Close()
	coretest.WaitFor(t, "the abandoned request to be counted 499", func() bool {
		return strings.Contains(s.exposition(), `torchd_requests_total{model="digits",version="1.0",code="499"} 1`+"\n")
	})
	for _, l := range s.modelLines() {
		if strings.Contains(l, `code="200"`) || strings.HasPrefix(l, "torchd_batch_size_count") && !strings.HasSuffix(l, " 0") {
			t.Fatalf("the abandoned request ran or was counted as served: %s", l)
		}
	}
	if r := s.do("POST", "/predictions/digits", "image/png", heldOut(t)[0]); r.status != 200 {
		t.Fatalf("the next request: %d %s", r.status, r.body)
	}
}

// A request of images that are each under max_pixels but together over max_request_pixels
// is refused from their headers, with a 400 that names the option.
func TestRequestPixelBudget(t *testing.T) {
	s := newServer(t, 0)
	s.register(t, "url=digits.mar&initial_workers=1&synchronous=true")
	parts := make([][]byte, 12)
	for i := range parts {
		parts[i] = bombPNG(6000, 6000)
	}
	r := s.do("POST", "/predictions/digits", "multipart/form-data; boundary=b0undary", multipartBody("b0undary", parts...))
	errorShape(t, r, 400, "BadRequestException", "max_request_pixels")
}
