package handlers_test

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/torchd/torchd/errkind"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/handlers"
	"github.com/torchd/torchd/internal/npy"
	"github.com/torchd/torchd/torch"
)

// The tensor handler over models of two inputs (input_ids, attention_mask), from
// models/hfbert.py: a traced Hugging Face BERT whose answers are a tuple or a dict.

var hfZoo = filepath.Join("..", "models", "out", "hfbert")

type hfRef struct {
	Text   string      `json:"text"`
	IDs    []int64     `json:"ids"`
	Logits []float64   `json:"logits"`
	Hidden [][]float64 `json:"last_hidden_state"`
	Pooler []float64   `json:"pooler_output"`
	// The ids of tokenizer_bpe.json (max_length 64) and the classifier's logits on them.
	BPEIDs    []int64   `json:"bpe_ids"`
	BPELogits []float64 `json:"bpe_logits"`
}

func hfRefs(t testing.TB) []hfRef {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(hfZoo, "refs.json"))
	if err != nil {
		t.Skipf("%v: run `make models` first", err)
	}
	var r struct{ Items []hfRef }
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return r.Items
}

// bertInputs are the declared inputs of a BERT-style model: a variable sequence length.
var bertInputs = []archive.TensorSpec{
	{Name: "input_ids", DType: "int64", Shape: []int64{-1, -1}},
	{Name: "attention_mask", DType: "int64", Shape: []int64{-1, -1}},
}

func bertHandler(t *testing.T, file string, outs []archive.TensorSpec) (handlers.Handler, *torch.Module) {
	t.Helper()
	m, err := torch.Load(filepath.Join(hfZoo, file))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	h, err := handlers.New("tensor", handlers.Context{Config: archive.ModelConfig{Handler: "tensor", Inputs: bertInputs, Outputs: outs}, Dir: hfZoo})
	if err != nil {
		t.Fatal(err)
	}
	return h, m
}

// bertRequest is one text's ids and mask as the JSON object the handler takes.
func bertRequest(ids []int64) *handlers.Request {
	mask := make([]int64, len(ids))
	for i := range mask {
		mask[i] = 1
	}
	body, _ := json.Marshal(map[string]any{"input_ids": [][]int64{ids}, "attention_mask": [][]int64{mask}})
	return &handlers.Request{Inputs: []handlers.Payload{{Name: "body", ContentType: "application/json", Data: body}}, Header: func(string) string { return "" }}
}

func floats(t handlers.Tensor) []float64 {
	out := make([]float64, 0, len(t.Data)/4)
	for _, f := range logits(t) {
		out = append(out, float64(f))
	}
	return out
}

func maxDiff(a, b []float64) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	worst := 0.0
	for i := range a {
		worst = math.Max(worst, math.Abs(a[i]-b[i]))
	}
	return worst
}

// Texts of different lengths run as one batch, padded to the longest; each answer equals
// Python's for the text alone, and the sequence output is cut back to the text's length.
func TestTensorHandlerPadsSequences(t *testing.T) {
	refs := hfRefs(t)
	for _, file := range []string{"model.pt", "encoder.pt", "encoder_dict.pt"} {
		t.Run(file, func(t *testing.T) {
			var outs []archive.TensorSpec
			if file != "model.pt" {
				outs = []archive.TensorSpec{{Name: "last_hidden_state", DType: "float32", Shape: []int64{-1, -1, 32}}, {Name: "pooler_output", DType: "float32", Shape: []int64{-1, 32}}}
			}
			h, m := bertHandler(t, file, outs)
			var batch []*handlers.Sample
			for _, r := range refs {
				s, err := h.Preprocess(bertRequest(r.IDs))
				if err != nil {
					t.Fatal(err)
				}
				batch = append(batch, s)
			}
			outsByText, err := handlers.Infer(h, m, batch)
			if err != nil {
				t.Fatal(err)
			}
			worst := 0.0
			for i, r := range refs {
				out := outsByText[i]
				if file == "model.pt" {
					worst = math.Max(worst, maxDiff(floats(out[0]), r.Logits))
					continue
				}
				if len(out) != 2 {
					t.Fatalf("%d outputs, want 2", len(out))
				}
				hidden, pooler := out[0], out[1]
				if file == "encoder_dict.pt" && (hidden.Name != "last_hidden_state" || pooler.Name != "pooler_output") {
					t.Fatalf("dict outputs named %q, %q", hidden.Name, pooler.Name)
				}
				if want := fmt.Sprint([]int64{1, int64(len(r.IDs)), 32}); fmt.Sprint(hidden.Shape) != want {
					t.Fatalf("text %d: last_hidden_state %v, want %s (cut back to its length)", i, hidden.Shape, want)
				}
				var flat []float64
				for _, row := range r.Hidden {
					flat = append(flat, row...)
				}
				worst = math.Max(worst, math.Max(maxDiff(floats(hidden), flat), maxDiff(floats(pooler), r.Pooler)))
			}
			t.Logf("%d texts of lengths padded together: max |torchd - Python| = %.3g", len(refs), worst)
			if worst > 1e-4 {
				t.Fatalf("answers differ from Python's by %.3g", worst)
			}
			// The answer names both outputs.
			resp, err := h.Postprocess(batch[0], outsByText[0])
			if err != nil {
				t.Fatal(err)
			}
			if file != "model.pt" && (!strings.Contains(string(resp.Body), `"last_hidden_state": {"dtype": "float32", "shape": [1,`) || !strings.Contains(string(resp.Body), `"pooler_output"`)) {
				t.Fatalf("answer %.200s", resp.Body)
			}
		})
	}
}

// What the tensor handler refuses from a request for a model of two inputs.
func TestTensorHandlerNamedInputsRefused(t *testing.T) {
	h, err := handlers.New("tensor", handlers.Context{Config: archive.ModelConfig{Handler: "tensor", Inputs: bertInputs}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ body, msg string }{
		{`[[1, 2]]`, "the model takes 2 inputs (input_ids, attention_mask): send a JSON object with one tensor per input name"},
		{`{"input_ids": [[1, 2]]}`, `missing input "attention_mask"`},
		{`{"input_ids": [[1, 2]], "attention_mask": [[1, 1]], "token_type_ids": [[0, 0]]}`, `unknown input "token_type_ids"`},
		{`{"input_ids": [[1, 2]], "attention_mask": [[1, 1], [1, 1]]}`, `inputs disagree on the batch size`},
		{`{"input_ids": [[1.5, 2]], "attention_mask": [[1, 1]]}`, `input "input_ids"`},
		{`{"input_ids": {"data": [1, 2], "dtype": "float32"}, "attention_mask": [[1, 1]]}`, `input "input_ids" must be int64, got float32`},
	} {
		_, err := h.Preprocess(&handlers.Request{Inputs: []handlers.Payload{{Name: "body", ContentType: "application/json", Data: []byte(c.body)}}, Header: func(string) string { return "" }})
		if err == nil || !errors.Is(err, errkind.BadInput) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: %v, want a 400 with %q", c.body, err, c.msg)
		}
	}
	th := h.(handlers.TensorPreprocessor)
	if _, err := th.PreprocessTensor(handlers.Tensor{DType: torch.Int64, Shape: []int64{1, 2}, Data: make([]byte, 16)}); err == nil || !strings.Contains(err.Error(), "send each as an input named input_ids, attention_mask") {
		t.Errorf("one tensor for two inputs: %v", err)
	}
}

// A Hugging Face sequence classifier traced as users trace it (it returns a tuple whose first
// element is the logits), served by text_classifier with a tokenizer.json, its WordPiece one
// and a byte-level BPE one: the texts, special tokens written in them included, get Python's
// ids and probabilities.
func TestTextClassifierHFExport(t *testing.T) {
	refs := hfRefs(t)
	m, err := torch.Load(filepath.Join(hfZoo, "model.pt"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	b, err := os.ReadFile(filepath.Join(hfZoo, "index_to_name.json"))
	if err != nil {
		t.Fatal(err)
	}
	labels, err := archive.ParseLabels("index_to_name.json", b)
	if err != nil {
		t.Fatal(err)
	}
	cfg := archive.ModelConfig{File: "model-config.toml", Handler: "text_classifier"}
	for _, c := range []struct {
		tokenizer string
		ids       func(hfRef) []int64
		logits    func(hfRef) []float64
	}{
		{"tokenizer.json", func(r hfRef) []int64 { return r.IDs }, func(r hfRef) []float64 { return r.Logits }},
		{"tokenizer_bpe.json", func(r hfRef) []int64 { return r.BPEIDs }, func(r hfRef) []float64 { return r.BPELogits }},
	} {
		cfg.Options = map[string]any{"tokenizer": c.tokenizer, "max_length": int64(64)}
		h, err := handlers.New("text_classifier", handlers.Context{Config: cfg, Dir: hfZoo, Labels: labels})
		if err != nil {
			t.Fatal(err)
		}
		var batch []*handlers.Sample
		for _, r := range refs {
			s, err := h.Preprocess(&handlers.Request{Inputs: []handlers.Payload{{Name: "body", ContentType: "text/plain", Data: []byte(r.Text)}}, Header: func(string) string { return "" }})
			if err != nil {
				t.Fatal(err)
			}
			if got, want := fmt.Sprint(s.State), fmt.Sprint(struct{ ids [][]int64 }{[][]int64{c.ids(r)}}); got != want {
				t.Errorf("%s: %q: ids %s, want Python's %s", c.tokenizer, r.Text, got, want)
			}
			batch = append(batch, s)
		}
		outs, err := handlers.Infer(h, m, batch)
		if err != nil {
			t.Fatal(err)
		}
		worst := 0.0
		for i, r := range refs {
			resp, err := h.Postprocess(batch[i], outs[i])
			if err != nil {
				t.Fatal(err)
			}
			var got map[string]float64
			if err := json.Unmarshal(resp.Body, &got); err != nil {
				t.Fatalf("%s: %v", resp.Body, err)
			}
			sum := 0.0
			for _, l := range c.logits(r) {
				sum += math.Exp(l)
			}
			for k, l := range c.logits(r) {
				worst = math.Max(worst, math.Abs(got[labels[k]]-math.Exp(l)/sum))
			}
		}
		t.Logf("%s: %d texts: max |torchd - Python| probability = %.3g", c.tokenizer, len(refs), worst)
		if worst > 1e-5 {
			t.Fatalf("%s: probabilities differ from Python's by %.3g", c.tokenizer, worst)
		}
	}
	// The tokenizer option names a file the archive lacks, or one that is no tokenizer.json.
	for file, msg := range map[string]string{
		"nope.json":        `model-config.toml: option tokenizer: the archive has no file "nope.json"`,
		"../hfbert/x.json": `option tokenizer: "../hfbert/x.json" is not a file inside the archive`,
		"refs.json":        `refs.json: model type "" is not supported: torchd's tokenizers read WordPiece (BERT-style) and byte-level BPE (GPT-2, RoBERTa) tokenizer.json files`,
	} {
		cfg.Options = map[string]any{"tokenizer": file}
		if _, err := handlers.New("text_classifier", handlers.Context{Config: cfg, Dir: hfZoo}); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("tokenizer %q: %v, want %q", file, err, msg)
		}
	}
}

// An archive that holds a Hugging Face export's tokenizer.json beside its vocab.txt is
// tokenized by the tokenizer.json when no option names either: "[SEP]" in the text is the
// [SEP] token, as Hugging Face keeps it, not "[", "sep", "]".
func TestTextClassifierPrefersTokenizerJSON(t *testing.T) {
	cfg := archive.ModelConfig{File: "model-config.toml", Handler: "text_classifier", Options: map[string]any{}}
	ids := func(options map[string]any) string {
		cfg.Options = options
		h, err := handlers.New("text_classifier", handlers.Context{Config: cfg, Dir: hfZoo})
		if err != nil {
			t.Fatal(err)
		}
		s, err := h.Preprocess(&handlers.Request{Inputs: []handlers.Payload{{Name: "body", ContentType: "text/plain", Data: []byte("a [SEP] b")}}, Header: func(string) string { return "" }})
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprint(s.State)
	}
	if got := ids(map[string]any{}); got != "{[[101 1037 102 1038 102]]}" {
		t.Errorf("the archive's tokenizer.json: %s, want [SEP] kept (102)", got)
	}
	if got := ids(map[string]any{"vocab": "vocab.txt"}); got == "{[[101 1037 102 1038 102]]}" {
		t.Errorf("vocab.txt named: %s, want BERT's tokenization.py, which splits [SEP]", got)
	}
}

// A model of two inputs takes them as multipart fields named after them, .npy or JSON each,
// and answers as for the JSON object.
func TestTensorHandlerNamedFields(t *testing.T) {
	refs := hfRefs(t)
	h, m := bertHandler(t, "model.pt", nil)
	r := refs[1]
	idsData := make([]byte, 8*len(r.IDs))
	maskJSON := "[["
	for i, id := range r.IDs {
		binary.LittleEndian.PutUint64(idsData[8*i:], uint64(id))
		if i > 0 {
			maskJSON += ", "
		}
		maskJSON += "1"
	}
	maskJSON += "]]"
	ids, err := npy.Encode(npy.Array{DType: "int64", Shape: []int64{1, int64(len(r.IDs))}, Data: idsData})
	if err != nil {
		t.Fatal(err)
	}
	req := &handlers.Request{Inputs: []handlers.Payload{
		{Name: "attention_mask", ContentType: "application/json", Data: []byte(maskJSON)},
		{Name: "input_ids", ContentType: "application/x-npy", Data: ids},
	}, Header: func(string) string { return "" }}
	s, err := h.Preprocess(req)
	if err != nil {
		t.Fatal(err)
	}
	out, err := handlers.Infer(h, m, []*handlers.Sample{s})
	if err != nil {
		t.Fatal(err)
	}
	if d := maxDiff(floats(out[0][0]), r.Logits); d > 1e-4 {
		t.Fatalf("logits differ from Python's by %.3g", d)
	}
	req.Inputs[0].Name = "mask"
	if _, err := h.Preprocess(req); err == nil || !strings.Contains(err.Error(), `unknown input "mask": the model takes input_ids, attention_mask`) {
		t.Fatalf("a field of another name: %v", err)
	}
}

// The refusals issue #53 found, with their messages: an archive without the default
// vocab.txt names the option and the file; a model that returns something other than logits
// (here a dict, as the encoder_dict export) is named in TorchScript's terms, never Go's.
func TestTextClassifierRefusals(t *testing.T) {
	cfg := archive.ModelConfig{File: "model-config.toml", Handler: "text_classifier", Options: map[string]any{}}
	_, err := handlers.New("text_classifier", handlers.Context{Config: cfg, Dir: t.TempDir()})
	if err == nil || err.Error() != `model-config.toml: option vocab: the archive has no file "vocab.txt": add it to the archive (torchd archive --extra-files), or name the right file` {
		t.Errorf("no vocab.txt: %v", err)
	}
	h, err := handlers.New("text_classifier", handlers.Context{Config: cfg, Dir: hfZoo})
	if err != nil {
		t.Fatal(err)
	}
	m, err := torch.Load(filepath.Join(hfZoo, "encoder_dict.pt"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	s, err := h.Preprocess(&handlers.Request{Inputs: []handlers.Payload{{Name: "body", ContentType: "text/plain", Data: []byte("a great movie")}}, Header: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	_, err = handlers.Infer(h, m, []*handlers.Sample{s})
	if err == nil || !strings.Contains(err.Error(), "want a tensor of logits (or a tuple that starts with it)") || !strings.Contains(err.Error(), "Dict[str, Tensor]") ||
		strings.Contains(err.Error(), "map[") || strings.Contains(err.Error(), "interface") {
		t.Errorf("a dict for logits: %v", err)
	}
}

// torchvision's scripted segmenter behind the tensor handler, the case issue #53 found
// answering a Go type name: its dict comes back as outputs named by the dict's keys.
func TestTensorHandlerSegmenterDict(t *testing.T) {
	m, err := torch.Load(filepath.Join("..", "models", "out", "segmenter", "model.pt"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	in := []archive.TensorSpec{{Name: "images", DType: "float32", Shape: []int64{-1, 3, -1, -1}}}
	h, err := handlers.New("tensor", handlers.Context{Config: archive.ModelConfig{Handler: "tensor", Inputs: in}})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(map[string]any{"data": make([]float32, 3*64*64), "shape": []int{1, 3, 64, 64}, "dtype": "float32"})
	s, err := h.Preprocess(&handlers.Request{Inputs: []handlers.Payload{{Name: "body", ContentType: "application/json", Data: body}}, Header: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	outs, err := handlers.Infer(h, m, []*handlers.Sample{s})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := h.Postprocess(s, outs[0])
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]struct {
		DType string  `json:"dtype"`
		Shape []int64 `json:"shape"`
	}
	if err := json.Unmarshal(resp.Body, &got); err != nil {
		t.Fatalf("%v: %.200s", err, resp.Body)
	}
	if o, a := got["out"], got["aux"]; len(got) != 2 || o.DType != "float32" || fmt.Sprint(o.Shape) != "[1 4 64 64]" || fmt.Sprint(a.Shape) != "[1 4 64 64]" {
		t.Errorf("answer %+v, want out and aux, float32 [1, 4, 64, 64]", got)
	}
}
