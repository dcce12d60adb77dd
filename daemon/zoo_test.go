package daemon_test

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/torchd/torchd/internal/npy"
)

// Helpers of the zoo's models, Triton repositories and archives that the daemon's other tests
// use. The tests they came with moved beside their code (frontend/kserve, frontend/openai,
// handlers/text, handlers/vision, backends/onnx, backends/tritonpy), each with its own copy;
// what no test here uses any more goes once the other moves are merged.

// The archives of the store that other tests use, whose own tests moved beside their code.
func init() {
	storeArchives = append(storeArchives,
		storeArchive{"textcls", "textcls", "textcls", "1.0", ""},
		storeArchive{"minilm", "minilm", "minilm", "1.0", ""},
		storeArchive{"captioner", "captioner", "captioner", "1.0", ""},
		storeArchive{"efficientnet_lite0", "efficientnet_lite0", "efficientnet_lite0", "1.0", ""},
	)
}

func readZooNpy(t *testing.T, parts ...string) npy.Array {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(append([]string{zooDir}, parts...)...))
	if err != nil {
		t.Fatal(err)
	}
	a, err := npy.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func f32s(b []byte) []float32 {
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

// tritonDigits is the digits CNN's config: <name>__<index> tensors, dynamic batching.
const tritonDigits = `
name: "digits"
platform: "pytorch_libtorch"
max_batch_size: 8
input [
  {
    name: "INPUT__0"
    data_type: TYPE_FP32
    dims: [ 1, 28, 28 ]
  }
]
output [
  {
    name: "OUTPUT__0"
    data_type: TYPE_FP32
    dims: [ 10 ]
  }
]
dynamic_batching {
  max_queue_delay_microseconds: 2000
}
instance_group [
  {
    count: 1
    kind: KIND_CPU
  }
]
`

// repoModel writes repo/name/config.pbtxt and copies the zoo's file into each version.
func repoModel(t testing.TB, repo, name, config, zoo, file string, versions ...string) {
	t.Helper()
	dir := filepath.Join(repo, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.pbtxt"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, v := range versions {
		copyFile(t, filepath.Join(zooDir, zoo, file), filepath.Join(dir, v, file))
	}
}

func copyFile(t testing.TB, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	// Write then rename, as a deployment replaces a file: a reader sees the old or the new.
	tmp := to + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, to); err != nil {
		t.Fatal(err)
	}
}

// index returns the repository index as "name version state: reason" lines.
func repoIndex(t testing.TB, s *server) map[string]string {
	t.Helper()
	var idx []struct{ Name, Version, State, Reason string }
	r := do(t, "POST", s.inf+"/v2/repository/index", "application/json", nil)
	r.json(t, &idx)
	out := map[string]string{}
	for _, e := range idx {
		out[strings.TrimSuffix(e.Name+" "+e.Version, " ")] = strings.TrimSuffix(e.State+": "+e.Reason, ": ")
	}
	return out
}

// settled waits until no model of the repository is loading, and returns the index.
func settled(t testing.TB, s *server) map[string]string {
	t.Helper()
	s.waitHealthy(t) // the start-up models are loaded or failed
	for range 1200 {
		idx := repoIndex(t, s)
		loading := false
		for _, state := range idx {
			loading = loading || state == "LOADING" || state == "UNLOADING"
		}
		if !loading {
			return idx
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("the repository is still loading\n%s", s.Log())
	return nil
}

func captionOf(t testing.TB, r response) string {
	t.Helper()
	if r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	var c struct {
		Caption *string `json:"caption"`
	}
	r.json(t, &c)
	if c.Caption == nil {
		t.Fatalf("no caption in %s", r.body)
	}
	return *c.Caption
}
