package daemon_test

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
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

func closeTo(t *testing.T, what string, got, want []float32, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range got {
		if math.Abs(float64(got[i]-want[i])) > tol {
			t.Fatalf("%s[%d] = %v, want %v (±%g)", what, i, got[i], want[i], tol)
		}
	}
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

// v2Out posts a v2 JSON request of one FP32 input and returns the first output's data.
func v2Out(t testing.TB, url, input string, shape []int64, data []float32) ([]float64, []int64) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"inputs": []map[string]any{{"name": input, "shape": shape, "datatype": "FP32", "data": data}}})
	r := do(t, "POST", url, "application/json", body)
	if r.status != 200 {
		t.Fatalf("POST %s: %d %s", url, r.status, r.body)
	}
	var out struct {
		Outputs []struct {
			Shape []int64   `json:"shape"`
			Data  []float64 `json:"data"`
		} `json:"outputs"`
	}
	r.json(t, &out)
	return out.Outputs[0].Data, out.Outputs[0].Shape
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

func digitsInput(seed int) []float32 {
	x := make([]float32, 28*28)
	for i := range x {
		x[i] = float32(math.Sin(float64(i*(seed+1)))) * 0.8
	}
	return x
}

func near(a, b []float64, tol float64) bool {
	if len(a) != len(b) || len(a) == 0 {
		return false
	}
	for i := range a {
		if math.Abs(a[i]-b[i]) > tol {
			return false
		}
	}
	return true
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

// textHeldOut returns the sentiment model's held-out sentences and their labels.
func textHeldOut(t testing.TB) ([]string, []string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(zooDir, "textcls", "heldout.json"))
	if err != nil {
		t.Fatal(err)
	}
	var h struct {
		Items []struct {
			Text  string `json:"text"`
			Label string `json:"label"`
		} `json:"items"`
	}
	if err := json.Unmarshal(b, &h); err != nil {
		t.Fatal(err)
	}
	var texts, labels []string
	for _, it := range h.Items {
		texts = append(texts, it.Text)
		labels = append(labels, it.Label)
	}
	return texts, labels
}

type embeddingsResponse struct {
	Object string `json:"object"`
	Data   []struct {
		Object    string          `json:"object"`
		Index     int             `json:"index"`
		Embedding json.RawMessage `json:"embedding"`
	} `json:"data"`
	Model string `json:"model"`
	Usage struct {
		PromptTokens int `json:"prompt_tokens"`
		TotalTokens  int `json:"total_tokens"`
	} `json:"usage"`
}

func embed(t testing.TB, s *server, body any) (response, embeddingsResponse) {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	r := do(t, "POST", s.inf+"/v1/embeddings", "application/json", b)
	var e embeddingsResponse
	if r.status == 200 {
		r.json(t, &e)
	}
	return r, e
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

// topK is one image's answer from an image classifier: labels in the response's order (by
// descending probability) and their probabilities.
type topK struct {
	labels []string
	probs  []float64
}

// effnetPhoto is one of models/out/efficientnet_lite0/images with the top-5 Python computed.
type effnetPhoto struct {
	name string
	img  []byte
	want topK
}

// effnetPhotos reads the photos and refs.json that models/efficientnet.py wrote, in name order.
func effnetPhotos(t testing.TB) []effnetPhoto {
	t.Helper()
	dir := filepath.Join(zooDir, "efficientnet_lite0")
	b, err := os.ReadFile(filepath.Join(dir, "refs.json"))
	if err != nil {
		t.Fatal(err)
	}
	var refs struct {
		Images map[string][][2]any `json:"images"`
	}
	if err := json.Unmarshal(b, &refs); err != nil {
		t.Fatal(err)
	}
	var out []effnetPhoto
	for name, top := range refs.Images {
		img, err := os.ReadFile(filepath.Join(dir, "images", name))
		if err != nil {
			t.Fatal(err)
		}
		p := effnetPhoto{name: name, img: img}
		for _, lp := range top {
			p.want.labels = append(p.want.labels, lp[0].(string))
			p.want.probs = append(p.want.probs, lp[1].(float64))
		}
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b effnetPhoto) int { return cmp.Compare(a.name, b.name) })
	if len(out) == 0 {
		t.Fatal("refs.json has no photos")
	}
	return out
}

// readTopK reads one {label: probability, ...} object from dec, keeping the keys' order, which
// a Go map would lose.
func readTopK(dec *json.Decoder) (topK, error) {
	var k topK
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return k, fmt.Errorf("want '{', got %v (%v)", tok, err)
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return k, err
		}
		var p float64
		if err := dec.Decode(&p); err != nil {
			return k, err
		}
		k.labels = append(k.labels, tok.(string))
		k.probs = append(k.probs, p)
	}
	_, err := dec.Token() // '}'
	return k, err
}

// topKOf parses a 200 response for one image.
func topKOf(t testing.TB, r response) topK {
	t.Helper()
	if r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	k, err := readTopK(json.NewDecoder(bytes.NewReader(r.body)))
	if err != nil {
		t.Fatalf("top-k response %s: %v", r.body, err)
	}
	return k
}

// sameTopK reports how got differs from want: other labels or another order, or a probability
// further than tol.
func sameTopK(got, want topK, tol float64) error {
	if !slices.Equal(got.labels, want.labels) {
		return fmt.Errorf("top-%d %q, want %q", len(want.labels), got.labels, want.labels)
	}
	for i := range want.probs {
		if d := math.Abs(got.probs[i] - want.probs[i]); d > tol {
			return fmt.Errorf("%q: probability %.9f, want %.9f (|diff| %.2g > %g)", want.labels[i], got.probs[i], want.probs[i], d, tol)
		}
	}
	return nil
}
