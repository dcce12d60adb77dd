package handlers

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/torchd/torchd/handlers/text"
	"github.com/torchd/torchd/torch"
)

func init() { Register("text_classifier", newTextClassifier) }

// TextClassifier is TorchServe's text_classifier for BERT-style models: UTF-8 text →
// WordPiece ids ([CLS] … [SEP]), or byte-level BPE ids (<s> … </s>) from a tokenizer.json
// → forward(input_ids, attention_mask), both int64 [N, L]
// padded to the batch's longest text → softmax → {label: probability}, all classes by
// default, most probable first.
//
// Options (model-config.toml [options]): vocab ("vocab.txt", a file of the archive), or
// tokenizer (a Hugging Face tokenizer.json of a WordPiece or byte-level BPE tokenizer, whose
// lower-casing and special tokens it follows; the archive's tokenizer.json is used when
// neither is set), max_length (128, the special tokens included; at most what the model's position embeddings
// take), lowercase (true: an uncased model), top_k (all classes).
type TextClassifier struct {
	tok      text.Tokenizer
	topK     int // 0: all classes
	maxTexts int
	labels   map[int]string
}

func newTextClassifier(ctx Context) (Handler, error) {
	cfg := ctx.Config
	maxLength, err := cfg.IntOption("max_length", 128)
	if err != nil {
		return nil, err
	}
	lowercase, err := cfg.BoolOption("lowercase", true)
	if err != nil {
		return nil, err
	}
	topK, err := cfg.IntOption("top_k", 0)
	if err != nil {
		return nil, err
	}
	if maxLength < 2 {
		return nil, fmt.Errorf("%s: option max_length must be ≥ 2 ([CLS] and [SEP]), got %d", cfg.File, maxLength)
	}
	if topK < 0 {
		return nil, fmt.Errorf("%s: option top_k must be ≥ 1 (or 0 for all classes), got %d", cfg.File, topK)
	}
	maxTexts, err := cfg.IntOption("max_texts", defaultMaxTexts)
	if err != nil {
		return nil, err
	}
	if maxTexts < 1 {
		return nil, fmt.Errorf("%s: option max_texts must be ≥ 1, got %d", cfg.File, maxTexts)
	}
	tok, err := loadTokenizer(ctx, text.Options{Lowercase: lowercase, MaxLength: maxLength})
	if err != nil {
		return nil, err
	}
	return &TextClassifier{tok: tok, topK: topK, maxTexts: maxTexts, labels: ctx.Labels}, nil
}

// defaultMaxTexts is the max_texts option's default: one request's texts all run in one
// batch on one worker, so their number is capped as images' are (max_images).
const defaultMaxTexts = 256

// textState is a sample's token ids, one sequence per text; Infer pads them.
type textState struct{ ids [][]int64 }

// Preprocess reads the request's texts and tokenizes each: a raw body or form field is one
// text; a JSON body (Content-Type application/json) may be a string, {"text": ...} or
// {"data": ...}, or a list of these, one item per text.
func (tc *TextClassifier) Preprocess(r *Request) (*Sample, error) {
	var texts []string
	for _, p := range r.Inputs {
		if !utf8.Valid(p.Data) {
			return nil, BadInput("input %q is not valid UTF-8", p.Name)
		}
		// The Content-Type decides, as in TorchServe: text/plain that looks like JSON is text.
		if declaredJSON(p) {
			t, err := jsonTexts(p.Data)
			if err != nil {
				return nil, err
			}
			texts = append(texts, t...)
		} else {
			texts = append(texts, string(p.Data))
		}
	}
	if len(texts) == 0 {
		return nil, BadInput("the request has no text")
	}
	if len(texts) > tc.maxTexts {
		return nil, BadInput("the request has %d texts, over max_texts (%d): send them in several requests", len(texts), tc.maxTexts)
	}
	st := textState{ids: make([][]int64, len(texts))}
	for i, t := range texts {
		if strings.TrimSpace(t) == "" {
			if len(texts) > 1 {
				return nil, BadInput("text %d is empty", i)
			}
			return nil, BadInput("the text is empty")
		}
		st.ids[i] = tc.tok.Encode(t)
	}
	return &Sample{Items: len(texts), State: st}, nil
}

// declaredJSON reports whether p's Content-Type is JSON: application/json, or a +json type.
func declaredJSON(p Payload) bool {
	ct, _, _ := strings.Cut(p.ContentType, ";")
	ct = strings.ToLower(strings.TrimSpace(ct))
	return ct == "application/json" || strings.HasSuffix(ct, "+json")
}

func jsonTexts(b []byte) ([]string, error) {
	var texts []string
	var collect func(v any, depth int) error
	collect = func(v any, depth int) error {
		if depth > 2 {
			return BadInput(`JSON text input nests too deep: send a string, {"text": ...} or a list of them`)
		}
		switch x := v.(type) {
		case string:
			texts = append(texts, x)
		case []any:
			for _, e := range x {
				if err := collect(e, depth+1); err != nil {
					return err
				}
			}
		case map[string]any:
			for _, k := range []string{"text", "data", "body", "instances"} {
				if e, ok := x[k]; ok {
					return collect(e, depth+1)
				}
			}
			return BadInput(`JSON text input needs "text" or "data"`)
		default:
			return BadInput("JSON text input must hold strings, got %s", jsonType(v))
		}
		return nil
	}
	err := eachJSONItem(b, func(v any, inList bool) error {
		if inList {
			return collect(v, 1)
		}
		return collect(v, 0)
	})
	if err != nil {
		return nil, err
	}
	return texts, nil
}

// WarmupSample is one short sentence.
func (tc *TextClassifier) WarmupSample() *Sample {
	return &Sample{Items: 1, State: textState{ids: [][]int64{tc.tok.Encode("a short sentence to warm up.")}}}
}

// Infer pads the batch's sequences to its longest and runs forward(input_ids,
// attention_mask) once. The mask is what keeps padding from changing a text's logits.
func (tc *TextClassifier) Infer(m torch.Model, batch []*Sample) ([][]Tensor, error) {
	var seqs [][]int64
	for _, s := range batch {
		ids, err := tc.sampleSequences(s)
		if err != nil {
			return nil, err
		}
		seqs = append(seqs, ids...)
	}
	ids, mask, width := tc.tok.Batch(seqs)
	n := int64(len(seqs))
	idsT, err := torch.NewTensor(ids, n, int64(width))
	if err != nil {
		return nil, err
	}
	maskT, err := torch.NewTensor(mask, n, int64(width))
	if err != nil {
		return nil, err
	}
	out, err := m.Forward(idsT, maskT)
	if err != nil {
		return nil, err
	}
	defer torch.CloseValue(out)
	logits, err := firstTensor(out)
	if err != nil {
		return nil, fmt.Errorf("text_classifier: %v, want a tensor of logits (or a tuple that starts with it)", err)
	}
	return Split([]*torch.Tensor{logits}, batch, len(seqs))
}

// sampleSequences returns a sample's token ids: Preprocess's, or, for a request of tensors
// (the Open Inference Protocol, which skips Preprocess), the ids its attention mask keeps,
// so that they are padded anew with the rest of the batch. Those ids are checked against the
// vocabulary: out of it, the model's embedding would fail with a 500 for the client's error.
func (tc *TextClassifier) sampleSequences(s *Sample) ([][]int64, error) {
	if st, ok := s.State.(textState); ok && len(st.ids) == s.Items {
		return st.ids, nil
	}
	if len(s.Tensors) != 2 {
		return nil, BadInput("text_classifier takes text, or the tensors input_ids and attention_mask; got %d tensors", len(s.Tensors))
	}
	ids, mask := s.Tensors[0], s.Tensors[1]
	if ids.DType != torch.Int64 || mask.DType != torch.Int64 || len(ids.Shape) != 2 || !slices.Equal(ids.Shape, mask.Shape) ||
		ids.Shape[0] != int64(s.Items) || int64(len(ids.Data)) != 8*ids.Numel() || len(mask.Data) != len(ids.Data) {
		return nil, BadInput("input_ids and attention_mask must both be int64 [N, L], got %v %v and %v %v", ids.DType, ids.Shape, mask.DType, mask.Shape)
	}
	width := int(ids.Shape[1])
	seqs := make([][]int64, s.Items)
	for i := range seqs {
		for j := range width {
			off := 8 * (i*width + j)
			if binary.LittleEndian.Uint64(mask.Data[off:]) != 0 {
				seqs[i] = append(seqs[i], int64(binary.LittleEndian.Uint64(ids.Data[off:])))
			}
		}
		if err := tc.tok.Check(seqs[i]); err != nil {
			return nil, BadInput("input_ids row %d: %v", i, err)
		}
	}
	return seqs, nil
}

// Postprocess returns, per text, every class (or the top_k) as an ordered {label:
// probability} object; several texts give a JSON array of them.
func (tc *TextClassifier) Postprocess(s *Sample, out []Tensor) (*Response, error) {
	return topKResponse("text_classifier", s, out, tc.topK, tc.labels)
}

// firstTensor is a model's answer as a tensor: the tensor it returned, or the first element
// of its tuple or list, as a Hugging Face model traced with return_dict=False (torchscript=True)
// returns (logits,) or (last_hidden_state, pooler_output).
func firstTensor(out any) (*torch.Tensor, error) {
	switch x := out.(type) {
	case *torch.Tensor:
		return x, nil
	case torch.Tuple:
		if len(x) > 0 {
			if t, ok := x[0].(*torch.Tensor); ok {
				return t, nil
			}
		}
	case []any:
		if len(x) > 0 {
			if t, ok := x[0].(*torch.Tensor); ok {
				return t, nil
			}
		}
	}
	return nil, fmt.Errorf("the model returned %s", torch.TypeName(out))
}
