package openai_test

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/backends/libtorch"
	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/core/coretest"
	"github.com/torchd/torchd/frontend"
	"github.com/torchd/torchd/frontend/frontendtest"
	"github.com/torchd/torchd/frontend/kserve"
	"github.com/torchd/torchd/frontend/openai"
	"github.com/torchd/torchd/frontend/torchserve"
	"github.com/torchd/torchd/lifecycle"
)

// The zoo's sentence embedder (models/out/minilm, its archive in model-store: `make models
// archives`) on LibTorch, through the inference port's front-ends as the daemon wires them
// (TorchServe's, this package's and KServe's routes), compared with sentence-transformers.

var (
	zooDir   = filepath.Join("..", "..", "models", "out")
	storeDir = filepath.Join("..", "..", "model-store")
)

type served struct {
	t         testing.TB
	inf, mgmt []*frontend.Route
}

func serve(t testing.TB) *served {
	t.Helper()
	reg := coretest.NewRegistryOf(t, libtorch.Backend{})
	open := func(req core.RegisterRequest) (*core.ModelVersion, error) {
		am, err := archive.Open(filepath.Join(storeDir, req.URL))
		if err != nil {
			return nil, core.Errorf(core.ErrModelNotFound, "%s: %v", req.URL, err)
		}
		name := req.Name
		if name == "" {
			name = am.Name
		}
		return reg.Add(name, am.Version, req, am)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	life := lifecycle.New(lifecycle.Config{Registry: reg, Open: open, ModelStore: storeDir, Log: log})
	t.Cleanup(life.Stop)
	ts := &torchserve.API{Registry: reg, Life: life, Ready: life.Ready, MaxRequestSize: 6553500, Log: log}
	ks := &kserve.API{Registry: reg, Life: life, Ready: life.Ready, MaxRequestSize: 6553500, LogLevel: new(slog.LevelVar)}
	return &served{t: t, inf: slices.Concat(ts.InferenceRoutes(), (&openai.API{Registry: reg}).Routes(), ks.Routes()), mgmt: ts.ManagementRoutes()}
}

func (s *served) register(query string) {
	s.t.Helper()
	r := frontendtest.Do(s.mgmt, frontendtest.Request{Method: "POST", URI: "/models?" + query})
	if r.Status != 200 {
		s.t.Fatalf("register %s: %d %s", query, r.Status, r.Body)
	}
}

func (s *served) do(method, uri, contentType string, body []byte) frontendtest.Response {
	return frontendtest.Do(s.inf, frontendtest.Request{Method: method, URI: uri, Body: body, Header: map[string]string{"Content-Type": contentType}})
}

func jsonOf(t testing.TB, r frontendtest.Response, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("%d %s: %v", r.Status, r.Body, err)
	}
}

func (s *served) embed(body any) (frontendtest.Response, embeddingsResponse) {
	t := s.t
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	r := s.do("POST", "/v1/embeddings", "application/json", b)
	var e embeddingsResponse
	if r.Status == 200 {
		jsonOf(t, r, &e)
	}
	return r, e
}

// embeddingRefs is models/out/minilm/embeddings_refs.json: sentence-transformers' encode()
// of each text, and the ids its tokenizer gave the text.
type embeddingRefs struct {
	Dim       int `json:"dim"`
	MaxLength int `json:"max_length"`
	Items     []struct {
		Text      string    `json:"text"`
		IDs       []int64   `json:"ids"`
		Embedding []float64 `json:"embedding"`
	} `json:"items"`
}

func readEmbeddingRefs(t testing.TB) embeddingRefs {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(zooDir, "minilm", "embeddings_refs.json"))
	if err != nil {
		t.Fatalf("no zoo model (run make models): %v", err)
	}
	var r embeddingRefs
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// embeddingNear fails unless got equals want within cosine ≥ 0.99999 and max abs diff ≤ 1e-4.
func embeddingNear(t testing.TB, what string, got []float32, want []float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d floats, want %d", what, len(got), len(want))
		return
	}
	var dot, ng, nw, maxAbs float64
	for i := range want {
		g := float64(got[i])
		dot += g * want[i]
		ng += g * g
		nw += want[i] * want[i]
		maxAbs = max(maxAbs, math.Abs(g-want[i]))
	}
	if cos := dot / math.Sqrt(ng*nw); cos < 0.99999 || maxAbs > 1e-4 {
		t.Errorf("%s: cosine %.7f, max abs diff %.2e against sentence-transformers", what, cos, maxAbs)
	}
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

// floats decodes one data[].embedding: a JSON array, or base64 of little-endian float32s.
func (e embeddingsResponse) floats(t testing.TB, i int) []float32 {
	t.Helper()
	raw := e.Data[i].Embedding
	var out []float32
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			t.Fatal(err)
		}
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			t.Fatal(err)
		}
		for k := 0; k+4 <= len(b); k += 4 {
			out = append(out, math.Float32frombits(binary.LittleEndian.Uint32(b[k:])))
		}
		return out
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// /v1/embeddings answers sentence-transformers' encode() for every reference text: alone,
// all in one request (padded to the longest, which is over max_seq_length and cut), as
// token ids, and in base64; usage counts the ids the model saw.
func TestEmbeddingsMatchSentenceTransformers(t *testing.T) {
	if raceBuild {
		t.Skip("a gate of forwards, not of Go's concurrency: it runs without -race")
	}
	s := serve(t)
	s.register("url=minilm.mar&batch_size=8&max_batch_delay=5&initial_workers=1&synchronous=true")
	refs := readEmbeddingRefs(t)

	texts := make([]string, len(refs.Items))
	tokens, truncated := 0, 0
	for i, it := range refs.Items {
		texts[i] = it.Text
		tokens += len(it.IDs)
		if len(it.IDs) == refs.MaxLength {
			truncated++
		}
		r, e := s.embed(map[string]any{"model": "minilm", "input": it.Text})
		if r.Status != 200 {
			t.Fatalf("text %d: %d %s", i, r.Status, r.Body)
		}
		if len(e.Data) != 1 || e.Usage.PromptTokens != len(it.IDs) || e.Usage.TotalTokens != len(it.IDs) {
			t.Fatalf("text %d: %d embeddings, usage %+v, want 1 and %d tokens", i, len(e.Data), e.Usage, len(it.IDs))
		}
		embeddingNear(t, fmt.Sprintf("text %d alone", i), e.floats(t, 0), it.Embedding)
	}
	if truncated == 0 {
		t.Fatal("no reference text reaches max_seq_length: the truncation is untested")
	}

	r, e := s.embed(map[string]any{"model": "minilm", "input": texts, "encoding_format": "float"})
	if r.Status != 200 || r.ContentType != "application/json" {
		t.Fatalf("batch: %d %s %s", r.Status, r.ContentType, r.Body)
	}
	if e.Object != "list" || e.Model != "minilm" || len(e.Data) != len(texts) || e.Usage.PromptTokens != tokens || e.Usage.TotalTokens != tokens {
		t.Fatalf("batch: object %q model %q, %d embeddings, usage %+v; want list, minilm, %d, %d tokens", e.Object, e.Model, len(e.Data), e.Usage, len(texts), tokens)
	}
	for i, d := range e.Data {
		if d.Object != "embedding" || d.Index != i {
			t.Fatalf("data[%d]: object %q index %d", i, d.Object, d.Index)
		}
		embeddingNear(t, fmt.Sprintf("text %d in a padded batch of %d", i, len(texts)), e.floats(t, i), refs.Items[i].Embedding)
	}

	ids := make([][]int64, len(refs.Items))
	for i, it := range refs.Items {
		ids[i] = it.IDs
	}
	r, e = s.embed(map[string]any{"model": "minilm", "input": ids, "encoding_format": "base64", "dimensions": refs.Dim, "user": "test"})
	if r.Status != 200 || len(e.Data) != len(ids) {
		t.Fatalf("token ids in base64: %d %s", r.Status, r.Body)
	}
	for i := range e.Data {
		embeddingNear(t, fmt.Sprintf("token ids %d, base64", i), e.floats(t, i), refs.Items[i].Embedding)
	}
	r, e = s.embed(map[string]any{"model": "minilm", "input": ids[0]})
	if r.Status != 200 || len(e.Data) != 1 {
		t.Fatalf("one array of token ids: %d %s", r.Status, r.Body)
	}
	embeddingNear(t, "one array of token ids", e.floats(t, 0), refs.Items[0].Embedding)
}

// The same model through TorchServe's /predictions and KServe v2 (BYTES texts in, FP32 [N, 384] out).
func TestEmbeddingsOverPredictionsAndKServe(t *testing.T) {
	s := serve(t)
	s.register("url=minilm.mar&batch_size=8&max_batch_delay=5&initial_workers=1&synchronous=true")
	refs := readEmbeddingRefs(t)
	a, b := refs.Items[0], refs.Items[len(refs.Items)-1]

	r := s.do("POST", "/predictions/minilm", "text/plain; charset=utf-8", []byte(a.Text))
	var one [][]float32
	jsonOf(t, r, &one)
	if r.Status != 200 || len(one) != 1 {
		t.Fatalf("/predictions raw text: %d %s", r.Status, r.Body)
	}
	embeddingNear(t, "/predictions raw text", one[0], a.Embedding)
	body, _ := json.Marshal([]string{a.Text, b.Text})
	r = s.do("POST", "/predictions/minilm", "application/json", body)
	var two [][]float32
	jsonOf(t, r, &two)
	if r.Status != 200 || len(two) != 2 {
		t.Fatalf("/predictions JSON: %d %s", r.Status, r.Body)
	}
	embeddingNear(t, "/predictions JSON 0", two[0], a.Embedding)
	embeddingNear(t, "/predictions JSON 1", two[1], b.Embedding)

	body, _ = json.Marshal(map[string]any{"inputs": []any{map[string]any{
		"name": "text", "datatype": "BYTES", "shape": []int{2}, "data": []string{a.Text, b.Text}}}})
	r = s.do("POST", "/v2/models/minilm/infer", "application/json", body)
	var v2 struct {
		Outputs []struct {
			Name     string    `json:"name"`
			Datatype string    `json:"datatype"`
			Shape    []int     `json:"shape"`
			Data     []float32 `json:"data"`
		} `json:"outputs"`
	}
	jsonOf(t, r, &v2)
	if r.Status != 200 || len(v2.Outputs) != 1 || v2.Outputs[0].Name != "embedding" || v2.Outputs[0].Datatype != "FP32" ||
		fmt.Sprint(v2.Outputs[0].Shape) != fmt.Sprint([]int{2, refs.Dim}) {
		t.Fatalf("v2 infer: %d %.300s", r.Status, r.Body)
	}
	embeddingNear(t, "v2 0", v2.Outputs[0].Data[:refs.Dim], a.Embedding)
	embeddingNear(t, "v2 1", v2.Outputs[0].Data[refs.Dim:], b.Embedding)

	r = s.do("GET", "/v2/models/minilm", "", nil)
	if r.Status != 200 || !strings.Contains(string(r.Body), `"name":"text","datatype":"BYTES"`) {
		t.Fatalf("v2 metadata: %d %s", r.Status, r.Body)
	}
	body, _ = json.Marshal(map[string]any{"inputs": []any{map[string]any{
		"name": "text", "datatype": "BYTES", "shape": []int{1}, "data": []string{""}}}})
	r = s.do("POST", "/v2/models/minilm/infer", "application/json", body)
	if r.Status != 400 || !strings.Contains(string(r.Body), `"error":"input 0 is empty"`) {
		t.Fatalf("v2 empty text: %d %s", r.Status, r.Body)
	}
	body, _ = json.Marshal(map[string]any{"inputs": []any{map[string]any{
		"name": "text", "datatype": "BYTES", "shape": []int{1, 2}, "data": []string{"a", "b"}}}})
	r = s.do("POST", "/v2/models/minilm/infer", "application/json", body)
	if r.Status != 400 || !strings.Contains(string(r.Body), "must have shape [N] or [N, 1]") {
		t.Fatalf("v2 texts of shape [1, 2]: %d %s", r.Status, r.Body)
	}
}
