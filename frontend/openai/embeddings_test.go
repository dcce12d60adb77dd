package openai

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/core/coretest"
	"github.com/torchd/torchd/frontend/frontendtest"
	"github.com/torchd/torchd/handlers"
	"github.com/torchd/torchd/torch"
)

// The API is tested as a codec over a registry whose models are package coretest's runtime
// double: "emb" is served by the real text_embedding handler (its tokenizer, its refusals of
// bad input) over a model that answers row i of a request as 384 floats of (i+1)/8, and "digits"
// by the tensor handler. The answers are compared with testdata/*.golden; what
// sentence-transformers computes is served_test.go's (TestEmbeddingsMatchSentenceTransformers),
// with the real model.

// embeddingArchive's files: sentence-transformers' configuration as minilm's (384 floats,
// mean pooling, max_seq_length 256), and a WordPiece vocabulary of a few words.
var embeddingFiles = map[string]string{
	"modules.json": `[{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
		{"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
		{"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]`,
	"sentence_bert_config.json": `{"max_seq_length": 256, "do_lower_case": false}`,
	"1_Pooling/config.json":     `{"word_embedding_dimension": 384, "pooling_mode_mean_tokens": true}`,
	"vocab.txt":                 "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\nworld\ngreat\none\nmore\na\n",
}

const dim = 384

// embeddingRows answers each of a sample's rows as dim floats of (row+1)/8.
func embeddingRows(s *handlers.Sample) ([]handlers.Tensor, error) {
	xs := make([]float32, s.Items*dim)
	for i := range xs {
		xs[i] = float32(i/dim+1) / 8
	}
	return []handlers.Tensor{coretest.Floats([]int64{int64(s.Items), dim}, xs...)}, nil
}

type fixture struct {
	// fail makes the model fail; short makes it answer one float short a row.
	fail, short atomic.Bool
	rt          *coretest.Runtime
	r           *core.Registry
	api         *API
}

func newFixture(t *testing.T, config string) *fixture {
	f := &fixture{}
	f.rt = &coretest.Runtime{Compute: func(s *handlers.Sample) ([]handlers.Tensor, error) {
		switch {
		case len(s.Tensors) > 0 && s.Tensors[0].DType == torch.Float32:
			return []handlers.Tensor{s.Tensors[0]}, nil // the digits model: its input back
		case f.fail.Load():
			return nil, errors.New("the model failed")
		case f.short.Load():
			out, _ := embeddingRows(s)
			out[0].Data = out[0].Data[4:]
			return out, nil
		}
		return embeddingRows(s)
	}}
	f.r = coretest.NewRegistry(t, f.rt)
	coretest.Add(t, f.r, "emb", coretest.Archive(t, "text_embedding", config, embeddingFiles))
	coretest.Add(t, f.r, "digits", coretest.Archive(t, "tensor", coretest.XConfig, nil))
	f.api = &API{Registry: f.r}
	return f
}

func (f *fixture) post(body string, header map[string]string) frontendtest.Response {
	return frontendtest.Do(f.api.Routes(), frontendtest.Request{Method: "POST", URI: "/v1/embeddings", Body: []byte(body), Header: header})
}

// Embeddings in OpenAI's shape: one per input, floats or base64 of little-endian float32s,
// usage counting the ids the model saw ([CLS] and [SEP] included).
func TestEmbeddingsAnswers(t *testing.T) {
	f := newFixture(t, "")
	for _, c := range []struct{ name, body string }{
		{"one_string", `{"model": "emb", "input": "hello world"}`},
		{"strings", `{"model": "emb", "input": ["hello", "great world", "a"], "user": "ignored"}`},
		{"token_ids", `{"model": "emb", "input": [2, 5, 6, 3]}`},
		{"arrays_of_token_ids", `{"model": "emb", "input": [[2, 5, 3], [2, 7, 7, 3]]}`},
		{"base64", `{"model": "emb", "input": ["hello", "world"], "encoding_format": "base64"}`},
		{"float_format_and_dimensions", `{"model": "emb", "input": "hello", "encoding_format": "float", "dimensions": 384}`},
		{"unknown_words", `{"model": "emb", "input": "zebra"}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			frontendtest.Golden(t, "embeddings/"+c.name, f.post(c.body, nil))
		})
	}
	// Over max_seq_length, text is cut as sentence-transformers cuts it (truncate true, the
	// default): 256 ids.
	long := strings.Repeat("great ", 300)
	if r := f.post(`{"model": "emb", "input": "`+long+`"}`, nil); r.Status != 200 || !strings.Contains(string(r.Body), `"prompt_tokens":256,`) {
		t.Errorf("over-long text: %d %.300s, want 200 with 256 tokens", r.Status, r.Body)
	}
}

// Every error in OpenAI's shape, {"error": {"message", "type", "param", "code"}}, with the
// status OpenAI answers.
func TestEmbeddingsErrors(t *testing.T) {
	f := newFixture(t, "")
	for _, c := range []struct{ name, body string }{
		{"not_json", `{"model": "emb", "input": `},
		{"not_an_object", `["emb"]`},
		{"missing_model", `{"input": "hello"}`},
		{"model_not_a_string", `{"model": 3, "input": "hello"}`},
		{"unknown_model", `{"model": "nope", "input": "hello"}`},
		{"not_an_embedding_model", `{"model": "digits", "input": "hello"}`},
		{"missing_input", `{"model": "emb"}`},
		{"null_input", `{"model": "emb", "input": null}`},
		{"empty_string", `{"model": "emb", "input": ""}`},
		{"blank_string", `{"model": "emb", "input": " \t"}`},
		{"empty_array", `{"model": "emb", "input": []}`},
		{"empty_string_in_an_array", `{"model": "emb", "input": ["a", ""]}`},
		{"empty_token_ids", `{"model": "emb", "input": [[2, 3], []]}`},
		{"number", `{"model": "emb", "input": 42}`},
		{"object", `{"model": "emb", "input": {"a": 1}}`},
		{"mixed_array", `{"model": "emb", "input": ["a", 7]}`},
		{"array_of_booleans", `{"model": "emb", "input": [true]}`},
		{"nested_too_deep", `{"model": "emb", "input": [[["a"]]]}`},
		{"fractional_token_id", `{"model": "emb", "input": [2, 2.5, 3]}`},
		{"string_in_token_ids", `{"model": "emb", "input": [[2, "a", 3]]}`},
		{"token_id_outside_the_vocabulary", `{"model": "emb", "input": [2, 30522, 3]}`},
		{"negative_token_id", `{"model": "emb", "input": [2, -1, 3]}`},
		{"token_ids_over_max_seq_length", fmt.Sprintf(`{"model": "emb", "input": [%s3]}`, strings.Repeat("7,", 256))},
		{"encoding_format_unknown", `{"model": "emb", "input": "a", "encoding_format": "binary"}`},
		{"encoding_format_not_a_string", `{"model": "emb", "input": "a", "encoding_format": 1}`},
		{"dimensions_zero", `{"model": "emb", "input": "a", "dimensions": 0}`},
		{"dimensions_negative", `{"model": "emb", "input": "a", "dimensions": -3}`},
		{"dimensions_over_the_models", `{"model": "emb", "input": "a", "dimensions": 385}`},
		{"dimensions_shorter", `{"model": "emb", "input": "a", "dimensions": 128}`},
		{"dimensions_not_a_number", `{"model": "emb", "input": "a", "dimensions": "384"}`},
		{"malformed_request_timeout", `{"model": "emb", "input": "a"}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			var h map[string]string
			if c.name == "malformed_request_timeout" {
				h = map[string]string{"X-Request-Timeout": "soon"}
			}
			frontendtest.Golden(t, "errors/"+c.name, f.post(c.body, h))
		})
	}
}

// The core's refusals in OpenAI's shape: a full queue and a passed deadline are server_errors
// (503 with Retry-After, 504), a failed model a 500. The model's worker is held, so each state
// is reached whatever the machine's speed.
func TestEmbeddingsServerErrors(t *testing.T) {
	f := newFixture(t, "job_queue_size = 1\n")
	v, err := f.r.Get("emb", "")
	if err != nil {
		t.Fatal(err)
	}
	held, release := f.rt.Model("emb", "1").Hold()
	defer release()
	done := make(chan frontendtest.Response, 2)
	go func() { done <- f.post(`{"model": "emb", "input": "hello"}`, nil) }()
	<-held
	go func() {
		for {
			r := f.post(`{"model": "emb", "input": "world"}`, nil)
			// A request that arrives as the worker takes the one before it may be refused for a
			// moment: that one's queue place is given back just after the worker has it.
			if r.Status == 503 && v.Pending() == 0 {
				continue
			}
			done <- r
			return
		}
	}()
	coretest.WaitFor(t, "the second request queued", func() bool { return v.Pending() == 1 })

	full := f.post(`{"model": "emb", "input": "one more"}`, nil)
	frontendtest.Golden(t, "errors/queue_full", full)
	if full.Header.Peek("Retry-After") == nil {
		t.Error("a full queue's 503 has no Retry-After")
	}
	release()
	for range 2 {
		if r := <-done; r.Status != 200 {
			t.Errorf("a queued request: %d %s", r.Status, r.Body)
		}
	}
	// The rest on a queue of the default size: a request past its deadline keeps its place
	// until the worker reaches it, which a queue of one would show as full.
	f = newFixture(t, "")
	if v, err = f.r.Get("emb", ""); err != nil {
		t.Fatal(err)
	}
	held, release = f.rt.Model("emb", "1").Hold()
	go func() { done <- f.post(`{"model": "emb", "input": "hello"}`, nil) }()
	<-held
	frontendtest.Golden(t, "errors/deadline", f.post(`{"model": "emb", "input": "world"}`, map[string]string{"X-Request-Timeout": "20"}))
	release()
	<-done
	// The request past its deadline holds its queue place until the worker drops it.
	coretest.WaitFor(t, "the expired request dropped", func() bool { return v.Pending() == 0 })

	f.fail.Store(true)
	frontendtest.Golden(t, "errors/model_fails", f.post(`{"model": "emb", "input": "hello"}`, nil))
	f.fail.Store(false)
	f.short.Store(true)
	frontendtest.Golden(t, "errors/model_answers_short", f.post(`{"model": "emb", "input": "hello"}`, nil))
	f.short.Store(false)
	if r := f.post(`{"model": "emb", "input": "hello"}`, nil); r.Status != 200 {
		t.Errorf("after the failures: %d %s", r.Status, r.Body)
	}
}

// A model still loading is a 503 server_error with Retry-After, not the 404 of a model that
// does not exist.
func TestEmbeddingsWhileLoading(t *testing.T) {
	f := newFixture(t, "")
	loading, release := f.rt.HoldLoads()
	defer release()
	added := make(chan error, 1)
	go func() {
		_, err := f.r.Add("later", "1", core.RegisterRequest{Name: "later", Synchronous: true}, coretest.Archive(t, "text_embedding", "", embeddingFiles))
		added <- err
	}()
	<-loading
	frontendtest.Golden(t, "errors/loading", f.post(`{"model": "later", "input": "hello"}`, nil))
	release()
	if err := <-added; err != nil {
		t.Fatal(err)
	}
	if r := f.post(`{"model": "later", "input": "hello"}`, nil); r.Status != 200 {
		t.Errorf("once loaded: %d %s", r.Status, r.Body)
	}
}
