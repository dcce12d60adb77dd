package served_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http" // a real client: the other side is TorchServe itself, a whole server of its own
	"os"
	"path/filepath"
	"testing"

	"github.com/torchd/torchd/handlerproc"
	"github.com/torchd/torchd/internal/torchservetest"
)

// TorchServe itself, with service_envelope=kserve and then kservev2, answers the same KServe
// requests to the same archive as torchd does (which serves both at once): predictions and
// outputs equal, explanations equal within 1e-6. A real TorchServe, so the handler runtime
// needs Java and captum (torchservetest.Python).
func TestKServeEnvelopesMatchTorchServe(t *testing.T) {
	py := torchservetest.Python(t, filepath.Join("..", ".."))
	s := serve(t, "", &handlerproc.Backend{Python: py})
	archiveMNIST(t, py, s.store, "pymnist", "../testdata/tsdiff/mnist_handler.py")
	mars := t.TempDir()
	b, err := os.ReadFile(filepath.Join(s.store, "pymnist.mar"))
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
		ts := torchservetest.Start(t, py, mars, "service_envelope="+env)
		torchservetest.WaitWorkerReady(t, ts.Mgmt, "pymnist", ts.Exited)
		for _, c := range calls {
			if c.envelope != env {
				continue
			}
			resp, err := http.Post(ts.Inf+c.path, "application/json", bytes.NewReader([]byte(c.body)))
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("TorchServe %s: %d %.300s %v", c.path, resp.StatusCode, b, err)
			}
			want[c.path] = b
		}
		ts.Stop()
	}
	s.register(t, "url=pymnist.mar&initial_workers=1&synchronous=true")
	for _, c := range calls {
		r := s.inf("POST", c.path, "application/json", []byte(c.body))
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
