package daemon_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TorchServe's KServe envelopes compared with TorchServe itself (a real TorchServe, so a
// whole server): what torchd answers through a Python handler is handlerproc/served's
// TestPythonHandlerKServeAndExplanations and TestPythonHandlerCustomMetrics.

// archiveMNIST packs TorchServe's MNIST example network (seeded random weights) with handler
// (a file of daemon/testdata) into the e2e store as NAME.mar, with torch-model-archiver.
func archiveMNIST(t testing.TB, py, name, handler string, extra ...string) {
	t.Helper()
	src := t.TempDir()
	copyFile := func(from, to string) {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(src, to), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	copyFile("testdata/tsdiff/mnist_model.py", "mnist.py")
	copyFile(handler, filepath.Base(handler))
	for _, e := range extra {
		copyFile(e, filepath.Base(e))
	}
	args := []string{"--model-name", name, "--version", "1.0", "--model-file", "mnist.py", "--serialized-file", "weights.pt",
		"--handler", filepath.Base(handler), "--export-path", store, "--force"}
	if len(extra) > 0 {
		var names []string
		for _, e := range extra {
			names = append(names, filepath.Base(e))
		}
		args = append(args, "--extra-files", strings.Join(names, ","))
	}
	steps := [][]string{
		{py, "-c", "import torch, mnist; torch.manual_seed(0); torch.save(mnist.Net().state_dict(), 'weights.pt')"},
		append([]string{filepath.Join(filepath.Dir(py), "torch-model-archiver")}, args...),
	}
	for _, a := range steps {
		cmd := exec.Command(a[0], a[1:]...)
		cmd.Dir = src
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(a, " "), err, out)
		}
	}
	t.Cleanup(func() { os.Remove(filepath.Join(store, name+".mar")) })
}

// digitPNG is a 28×28 grayscale PNG whose pattern depends on seed.
func digitPNG(t testing.TB, seed int) []byte {
	img := image.NewGray(image.Rect(0, 0, 28, 28))
	for y := range 28 {
		for x := range 28 {
			img.SetGray(x, y, color.Gray{Y: uint8((x*(seed+3) + y*y*(seed+1) + seed*37) % 256)})
		}
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TorchServe itself, with service_envelope=kserve and then kservev2, answers the same KServe
// requests to the same archive as torchd does (which serves both at once): predictions and
// outputs equal, explanations equal within 1e-6.
func TestKServeEnvelopesMatchTorchServe(t *testing.T) {
	py := handlerPython(t)
	if _, err := exec.LookPath("java"); err != nil {
		t.Fatal("TorchServe needs Java (make setup installs openjdk-17-jre-headless)")
	}
	archiveMNIST(t, py, "pymnist", "testdata/tsdiff/mnist_handler.py")
	mars := t.TempDir()
	b, err := os.ReadFile(filepath.Join(store, "pymnist.mar"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mars, "pymnist.mar"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	b64 := func(seed int) string { return base64.StdEncoding.EncodeToString(digitPNG(t, seed)) }
	type call struct{ envelope, path, body string }
	calls := []call{
		{"kserve", "/v1/models/pymnist:predict", fmt.Sprintf(`{"instances":[{"data":%q},{"data":%q},{"data":%q}]}`, b64(0), b64(1), b64(2))},
		{"kserve", "/v1/models/pymnist:explain", fmt.Sprintf(`{"instances":[{"data":%q}]}`, b64(0))},
		{"kservev2", "/v2/models/pymnist/infer", fmt.Sprintf(`{"id":"req-7","inputs":[{"name":"a","shape":[1],"datatype":"BYTES","data":[%q]},{"name":"b","shape":[1],"datatype":"BYTES","data":[%q]}]}`, b64(1), b64(2))},
		{"kservev2", "/v2/models/pymnist/explain", fmt.Sprintf(`{"id":"req-8","inputs":[{"name":"img","shape":[1],"datatype":"BYTES","data":[%q]}]}`, b64(0))},
	}
	t.Setenv("OMP_NUM_THREADS", "1")
	want := map[string][]byte{}
	for _, env := range []string{"kserve", "kservev2"} {
		ts := startTorchServe(t, py, mars, "service_envelope="+env)
		waitWorkerReady(t, ts.mgmt, "pymnist", ts.exited)
		for _, c := range calls {
			if c.envelope == env {
				r := post(ts.inf+c.path, "application/json", []byte(c.body))
				if r.status != 200 {
					t.Fatalf("TorchServe %s: %d %.300s", c.path, r.status, r.body)
				}
				want[c.path] = r.body
			}
		}
		ts.stop()
	}
	s := startServer(t, "--python", py)
	s.register(t, "url=pymnist.mar&initial_workers=1&synchronous=true")
	for _, c := range calls {
		r := post(s.inf+c.path, "application/json", []byte(c.body))
		if r.status != 200 {
			t.Fatalf("torchd %s: %d %.300s", c.path, r.status, r.body)
		}
		var got, exp any
		r.json(t, &got)
		if err := json.Unmarshal(want[c.path], &exp); err != nil {
			t.Fatal(err)
		}
		jsonWithin(t, c.path, got, exp, 1e-6)
	}
}

// jsonWithin compares two JSON values: numbers within tol, everything else equal.
func jsonWithin(t *testing.T, at string, got, want any, tol float64) {
	t.Helper()
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok || len(g) != len(w) {
			t.Errorf("%s: %.200v, want %.200v", at, got, want)
			return
		}
		for k, v := range w {
			jsonWithin(t, at+"."+k, g[k], v, tol)
		}
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			t.Errorf("%s: %.200v, want %.200v", at, got, want)
			return
		}
		for i := range w {
			jsonWithin(t, fmt.Sprintf("%s[%d]", at, i), g[i], w[i], tol)
		}
	case float64:
		if g, ok := got.(float64); !ok || math.Abs(g-w) > tol {
			t.Errorf("%s: %v, want %v", at, got, want)
		}
	default:
		if got != want {
			t.Errorf("%s: %v, want %v", at, got, want)
		}
	}
}
