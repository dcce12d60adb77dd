package tuner

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/torchd/torchd/handlers"
	"github.com/torchd/torchd/internal/jsonfile"
	"github.com/torchd/torchd/torch"
)

// A curve is keyed by the model file's bytes, the device, the threads, whether the
// single-thread point was measured and the input's shapes: any of them changes the key.
func TestCurveKey(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.pt"), filepath.Join(dir, "b.pt")
	if err := os.WriteFile(a, []byte("model a"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(b, []byte("model b"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := &handlers.Sample{Tensors: []handlers.Tensor{{DType: torch.Float32, Shape: []int64{1, 4}}}}
	wide := &handlers.Sample{Tensors: []handlers.Tensor{{DType: torch.Float32, Shape: []int64{1, 8}}}}
	key := func(path, device string, threads int, sample *handlers.Sample, single bool) string {
		t.Helper()
		k, err := curveKey(path, device, threads, sample, single)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	base := key(a, "cpu", 2, s, false)
	if len(base) != 32 || key(a, "cpu", 2, s, false) != base {
		t.Fatalf("key %q is not 32 hex digits, stable", base)
	}
	for name, k := range map[string]string{
		"another file": key(b, "cpu", 2, s, false), "another device": key(a, "cuda:0", 2, s, false),
		"other threads": key(a, "cpu", 1, s, false), "single-thread point": key(a, "cpu", 2, s, true),
		"another shape": key(a, "cpu", 2, wide, false),
	} {
		if k == base {
			t.Errorf("%s: same key %s", name, k)
		}
	}
	if _, err := curveKey(filepath.Join(dir, "missing.pt"), "cpu", 1, s, false); err == nil {
		t.Error("a missing model file: no error")
	}
}

// A curve written is read back whole; a missing, corrupt or empty cache file is no curve.
func TestCurveCache(t *testing.T) {
	dir := t.TempDir()
	path := curvePath(dir, "k")
	if filepath.Dir(filepath.Dir(path)) != dir {
		t.Fatalf("cache file %s is not under %s", path, dir)
	}
	if _, ok := readCurve(path); ok {
		t.Fatal("a missing file read as a curve")
	}
	c := *testCurve(10, 12, 16)
	c.Threads, c.Took, c.SingleThreadMS = 2, 0.5, 7
	if err := jsonfile.Write(path, c); err != nil {
		t.Fatal(err)
	}
	got, ok := readCurve(path)
	if !ok || len(got.Points) != 3 || got.Points[2] != c.Points[2] || got.Threads != 2 || got.Took != 0.5 || got.SingleThreadMS != 7 {
		t.Fatalf("read back %+v, %v; want %+v", got, ok, c)
	}
	for name, body := range map[string]string{"corrupt": "{not json", "empty": `{"points": []}`} {
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, ok := readCurve(path); ok {
			t.Errorf("%s file read as a curve", name)
		}
	}
}
