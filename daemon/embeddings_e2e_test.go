package daemon_test

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func init() {
	storeArchives = append(storeArchives, storeArchive{"minilm", "minilm", "minilm", "1.0", ""})
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
		t.Fatal(err)
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

// /v1/embeddings answers sentence-transformers' encode() for every reference text: alone,
// all in one request (padded to the longest, which is over max_seq_length and cut), as
// token ids, and in base64; usage counts the ids the model saw.
func TestEmbeddingsMatchSentenceTransformers(t *testing.T) {
	s := startServer(t)
	s.register(t, "url=minilm.mar&batch_size=8&max_batch_delay=5&initial_workers=1&synchronous=true")
	refs := readEmbeddingRefs(t)

	texts := make([]string, len(refs.Items))
	tokens, truncated := 0, 0
	for i, it := range refs.Items {
		texts[i] = it.Text
		tokens += len(it.IDs)
		if len(it.IDs) == refs.MaxLength {
			truncated++
		}
		r, e := embed(t, s, map[string]any{"model": "minilm", "input": it.Text})
		if r.status != 200 {
			t.Fatalf("text %d: %d %s", i, r.status, r.body)
		}
		if len(e.Data) != 1 || e.Usage.PromptTokens != len(it.IDs) || e.Usage.TotalTokens != len(it.IDs) {
			t.Fatalf("text %d: %d embeddings, usage %+v, want 1 and %d tokens", i, len(e.Data), e.Usage, len(it.IDs))
		}
		embeddingNear(t, fmt.Sprintf("text %d alone", i), e.floats(t, 0), it.Embedding)
	}
	if truncated == 0 {
		t.Fatal("no reference text reaches max_seq_length: the truncation is untested")
	}

	r, e := embed(t, s, map[string]any{"model": "minilm", "input": texts, "encoding_format": "float"})
	if r.status != 200 || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("batch: %d %s %s", r.status, r.header.Get("Content-Type"), r.body)
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
	r, e = embed(t, s, map[string]any{"model": "minilm", "input": ids, "encoding_format": "base64", "dimensions": refs.Dim, "user": "test"})
	if r.status != 200 || len(e.Data) != len(ids) {
		t.Fatalf("token ids in base64: %d %s", r.status, r.body)
	}
	for i := range e.Data {
		embeddingNear(t, fmt.Sprintf("token ids %d, base64", i), e.floats(t, i), refs.Items[i].Embedding)
	}
	r, e = embed(t, s, map[string]any{"model": "minilm", "input": ids[0]})
	if r.status != 200 || len(e.Data) != 1 {
		t.Fatalf("one array of token ids: %d %s", r.status, r.body)
	}
	embeddingNear(t, "one array of token ids", e.floats(t, 0), refs.Items[0].Embedding)
}

// The same model through /predictions and KServe v2 (BYTES texts in, FP32 [N, 384] out).
func TestEmbeddingsOverPredictionsAndKServe(t *testing.T) {
	s := startServer(t)
	s.register(t, "url=minilm.mar&batch_size=8&max_batch_delay=5&initial_workers=1&synchronous=true")
	refs := readEmbeddingRefs(t)
	a, b := refs.Items[0], refs.Items[len(refs.Items)-1]

	r := do(t, "POST", s.inf+"/predictions/minilm", "text/plain; charset=utf-8", []byte(a.Text))
	var one [][]float32
	r.json(t, &one)
	if r.status != 200 || len(one) != 1 {
		t.Fatalf("/predictions raw text: %d %s", r.status, r.body)
	}
	embeddingNear(t, "/predictions raw text", one[0], a.Embedding)
	body, _ := json.Marshal([]string{a.Text, b.Text})
	r = do(t, "POST", s.inf+"/predictions/minilm", "application/json", body)
	var two [][]float32
	r.json(t, &two)
	if r.status != 200 || len(two) != 2 {
		t.Fatalf("/predictions JSON: %d %s", r.status, r.body)
	}
	embeddingNear(t, "/predictions JSON 0", two[0], a.Embedding)
	embeddingNear(t, "/predictions JSON 1", two[1], b.Embedding)

	body, _ = json.Marshal(map[string]any{"inputs": []any{map[string]any{
		"name": "text", "datatype": "BYTES", "shape": []int{2}, "data": []string{a.Text, b.Text}}}})
	r = do(t, "POST", s.inf+"/v2/models/minilm/infer", "application/json", body)
	var v2 struct {
		Outputs []struct {
			Name     string    `json:"name"`
			Datatype string    `json:"datatype"`
			Shape    []int     `json:"shape"`
			Data     []float32 `json:"data"`
		} `json:"outputs"`
	}
	r.json(t, &v2)
	if r.status != 200 || len(v2.Outputs) != 1 || v2.Outputs[0].Name != "embedding" || v2.Outputs[0].Datatype != "FP32" ||
		fmt.Sprint(v2.Outputs[0].Shape) != fmt.Sprint([]int{2, refs.Dim}) {
		t.Fatalf("v2 infer: %d %.300s", r.status, r.body)
	}
	embeddingNear(t, "v2 0", v2.Outputs[0].Data[:refs.Dim], a.Embedding)
	embeddingNear(t, "v2 1", v2.Outputs[0].Data[refs.Dim:], b.Embedding)

	r = do(t, "GET", s.inf+"/v2/models/minilm", "", nil)
	if r.status != 200 || !strings.Contains(string(r.body), `"name":"text","datatype":"BYTES"`) {
		t.Fatalf("v2 metadata: %d %s", r.status, r.body)
	}
	body, _ = json.Marshal(map[string]any{"inputs": []any{map[string]any{
		"name": "text", "datatype": "BYTES", "shape": []int{1}, "data": []string{""}}}})
	r = do(t, "POST", s.inf+"/v2/models/minilm/infer", "application/json", body)
	if r.status != 400 || !strings.Contains(string(r.body), `"error":"input 0 is empty"`) {
		t.Fatalf("v2 empty text: %d %s", r.status, r.body)
	}
	body, _ = json.Marshal(map[string]any{"inputs": []any{map[string]any{
		"name": "text", "datatype": "BYTES", "shape": []int{1, 2}, "data": []string{"a", "b"}}}})
	r = do(t, "POST", s.inf+"/v2/models/minilm/infer", "application/json", body)
	if r.status != 400 || !strings.Contains(string(r.body), "must have shape [N] or [N, 1]") {
		t.Fatalf("v2 texts of shape [1, 2]: %d %s", r.status, r.body)
	}
}

// Every error of /v1/embeddings in OpenAI's shape: {"error": {"message", "type", "param",
// "code"}} with the status OpenAI answers.
func TestEmbeddingsErrors(t *testing.T) {
	s := startServer(t)
	s.register(t, "url=minilm.mar&batch_size=8&max_batch_delay=5&initial_workers=1&synchronous=true")
	s.register(t, "url=digits.mar&initial_workers=1&synchronous=true")
	long := strings.Repeat("great ", 300)
	for _, c := range []struct {
		name   string
		body   string
		status int
		param  any
		code   any
		msg    string
	}{
		{"not JSON", `{"model": "minilm", "input": `, 400, nil, nil, "JSON object"},
		{"not an object", `["minilm"]`, 400, nil, nil, "JSON object"},
		{"missing model", `{"input": "hello"}`, 400, "model", nil, "'model' is required"},
		{"model not a string", `{"model": 3, "input": "hello"}`, 400, "model", nil, "'model' is required"},
		{"unknown model", `{"model": "nope", "input": "hello"}`, 404, "model", "model_not_found", "does not exist"},
		{"not an embedding model", `{"model": "digits", "input": "hello"}`, 400, "model", nil, "not an embedding model"},
		{"missing input", `{"model": "minilm"}`, 400, "input", nil, "'input' is required"},
		{"null input", `{"model": "minilm", "input": null}`, 400, "input", nil, "'input' is required"},
		{"empty string", `{"model": "minilm", "input": ""}`, 400, "input", nil, "input 0 is empty"},
		{"blank string", `{"model": "minilm", "input": " \t"}`, 400, "input", nil, "input 0 is empty"},
		{"empty array", `{"model": "minilm", "input": []}`, 400, "input", nil, "empty array"},
		{"empty string in an array", `{"model": "minilm", "input": ["a", ""]}`, 400, "input", nil, "input 1 is empty"},
		{"empty token ids", `{"model": "minilm", "input": [[101, 102], []]}`, 400, "input", nil, "input 1 is an empty array"},
		{"number", `{"model": "minilm", "input": 42}`, 400, "input", nil, "got a number"},
		{"object", `{"model": "minilm", "input": {"a": 1}}`, 400, "input", nil, "JSON input must be"},
		{"mixed array", `{"model": "minilm", "input": ["a", 7]}`, 400, "input", nil, "input 1 must be a string"},
		{"array of booleans", `{"model": "minilm", "input": [true]}`, 400, "input", nil, "got a boolean"},
		{"nested too deep", `{"model": "minilm", "input": [[["a"]]]}`, 400, "input", nil, "must be a string or an array of token ids"},
		{"fractional token id", `{"model": "minilm", "input": [101, 2.5, 102]}`, 400, "input", nil, "must be integers"},
		{"string in token ids", `{"model": "minilm", "input": [[101, "a", 102]]}`, 400, "input", nil, "must be integers"},
		{"token id outside the vocabulary", `{"model": "minilm", "input": [101, 30522, 102]}`, 400, "input", nil, "outside the vocabulary"},
		{"negative token id", `{"model": "minilm", "input": [101, -1, 102]}`, 400, "input", nil, "outside the vocabulary"},
		{"token ids over max_seq_length", fmt.Sprintf(`{"model": "minilm", "input": [%s102]}`, strings.Repeat("2307,", 256)), 400, "input", nil, "over the model's max_seq_length of 256"},
		{"encoding_format unknown", `{"model": "minilm", "input": "a", "encoding_format": "binary"}`, 400, "encoding_format", nil, `must be "float" or "base64"`},
		{"encoding_format not a string", `{"model": "minilm", "input": "a", "encoding_format": 1}`, 400, "encoding_format", nil, `must be "float" or "base64"`},
		{"dimensions zero", `{"model": "minilm", "input": "a", "dimensions": 0}`, 400, "dimensions", nil, "'dimensions' must be 384"},
		{"dimensions negative", `{"model": "minilm", "input": "a", "dimensions": -3}`, 400, "dimensions", nil, "'dimensions' must be 384"},
		{"dimensions over the model's", `{"model": "minilm", "input": "a", "dimensions": 385}`, 400, "dimensions", nil, "'dimensions' must be 384"},
		{"dimensions shorter", `{"model": "minilm", "input": "a", "dimensions": 128}`, 400, "dimensions", nil, "not trained to be cut shorter"},
		{"dimensions not a number", `{"model": "minilm", "input": "a", "dimensions": "384"}`, 400, "dimensions", nil, "'dimensions' must be 384"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := do(t, "POST", s.inf+"/v1/embeddings", "application/json", []byte(c.body))
			if r.status != c.status {
				t.Fatalf("status %d, want %d; body %s", r.status, c.status, r.body)
			}
			var e struct {
				Error map[string]any `json:"error"`
			}
			r.json(t, &e)
			msg, _ := e.Error["message"].(string)
			if len(e.Error) != 4 || e.Error["type"] != "invalid_request_error" || e.Error["param"] != c.param ||
				e.Error["code"] != c.code || !strings.Contains(msg, c.msg) {
				t.Fatalf("error %s, want type invalid_request_error, param %v, code %v, message containing %q", r.body, c.param, c.code, c.msg)
			}
		})
	}

	// Over max_seq_length, text is cut as sentence-transformers cuts it (truncate = true in
	// minilm.toml): 256 ids, [SEP] last.
	r, e := embed(t, s, map[string]any{"model": "minilm", "input": long})
	if r.status != 200 || e.Usage.PromptTokens != 256 {
		t.Fatalf("over-long text: %d, usage %+v, want 200 and 256 tokens; %.200s", r.status, e.Usage, r.body)
	}
}

// A full queue answers 503 in OpenAI's shape, type server_error, with Retry-After: one
// request of many long texts holds the only worker (describe shows it busy), a second takes
// the queue's one place (describe shows it pending). The texts need only outlast the second
// request's arrival and the third's answer; forty-eight took 30-50 s of a loaded CI machine.
func TestEmbeddingsQueueFull(t *testing.T) {
	s := startServer(t, "--job-queue-size", "1")
	s.register(t, "url=minilm.mar&batch_size=1&initial_workers=1&synchronous=true")
	long := make([]string, 16)
	for i := range long {
		long[i] = strings.Repeat(fmt.Sprintf("sentence %d keeps the worker busy. ", i), 40)
	}
	state := func() (busy bool, pending int) {
		var d []struct {
			Workers []struct {
				Status string `json:"status"`
			} `json:"workers"`
			JobQueueStatus struct {
				PendingRequests int `json:"pendingRequests"`
			} `json:"jobQueueStatus"`
		}
		do(t, "GET", s.mgmt+"/models/minilm", "", nil).json(t, &d)
		if len(d) != 1 || len(d[0].Workers) != 1 {
			t.Fatalf("describe: %+v, want one version with one worker", d)
		}
		return d[0].Workers[0].Status == "BUSY", d[0].JobQueueStatus.PendingRequests
	}
	done := make(chan response, 2)
	send := func() {
		go func() {
			b, _ := json.Marshal(map[string]any{"model": "minilm", "input": long})
			done <- do(t, "POST", s.inf+"/v1/embeddings", "application/json", b)
		}()
	}
	send()
	waitFor(t, time.Minute, "the first request in the worker", func() bool { busy, _ := state(); return busy })
	send()
	waitFor(t, time.Minute, "the second request in the queue", func() bool { _, n := state(); return n == 1 })
	r := do(t, "POST", s.inf+"/v1/embeddings", "application/json", []byte(`{"model": "minilm", "input": "one more"}`))
	var e struct {
		Error map[string]any `json:"error"`
	}
	r.json(t, &e)
	if r.status != 503 || r.header.Get("Retry-After") == "" || e.Error["type"] != "server_error" ||
		!strings.Contains(fmt.Sprint(e.Error["message"]), "queue is full") {
		t.Fatalf("third request: %d Retry-After %q %s, want 503 server_error with Retry-After", r.status, r.header.Get("Retry-After"), r.body)
	}
	for range 2 {
		if r := <-done; r.status != 200 {
			t.Errorf("a queued request: %d %.200s", r.status, r.body)
		}
	}
}
