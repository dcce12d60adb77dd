package handlers

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path"
	"strings"
	"unicode/utf8"

	"github.com/torchd/torchd/handlers/text"
	"github.com/torchd/torchd/internal/jsonfloat"
	"github.com/torchd/torchd/torch"
)

func init() { Register("text_embedding", newTextEmbedding) }

// TextEmbedding serves sentence-transformers models: UTF-8 text → WordPiece or BPE ids, as the
// model's Hugging Face tokenizer gives them → forward(input_ids, attention_mask), int64
// [N, L] padded to the batch's longest → token embeddings float32 [N, L, H] → pooling and
// normalization as the archive's modules.json and its Pooling module's config.json say → one
// float32 vector of H per text.
//
// The archive holds modules.json, sentence_bert_config.json (max_seq_length) and the
// Pooling module's config.json (e.g. 1_Pooling/config.json). Options (model-config.toml
// [options]): vocab ("vocab.txt") or tokenizer (a Hugging Face tokenizer.json, as for
// text_classifier), lowercase (true: an uncased model), truncate (true: text
// over max_seq_length is cut, as sentence-transformers' encode() cuts it; false: refused),
// max_texts (256).
type TextEmbedding struct {
	tok       text.Tokenizer
	maxLen    int // max_seq_length, [CLS] and [SEP] included
	truncate  bool
	pooling   string // "mean", "cls" or "max"
	normalize bool
	dim       int
	maxTexts  int
}

// stModule is one entry of sentence-transformers' modules.json.
type stModule struct {
	Path string `json:"path"`
	Type string `json:"type"`
}

func newTextEmbedding(ctx Context) (Handler, error) {
	cfg := ctx.Config
	lowercase, err := cfg.BoolOption("lowercase", true)
	if err != nil {
		return nil, err
	}
	truncate, err := cfg.BoolOption("truncate", true)
	if err != nil {
		return nil, err
	}
	maxTexts, err := cfg.IntOption("max_texts", defaultMaxTexts)
	if err != nil {
		return nil, err
	}
	if maxTexts < 1 {
		return nil, fmt.Errorf("%s: option max_texts must be ≥ 1, got %d", cfg.File, maxTexts)
	}
	te := &TextEmbedding{truncate: truncate, maxTexts: maxTexts}

	// The archive is untrusted: every file is opened inside it (os.OpenInRoot).
	var modules []stModule
	if err := readArchiveJSON(ctx.Dir, "modules.json", &modules); err != nil {
		return nil, err
	}
	var pooling string
	for _, m := range modules {
		switch m.Type {
		case "sentence_transformers.models.Transformer":
		case "sentence_transformers.models.Pooling":
			pooling = path.Join(m.Path, "config.json")
		case "sentence_transformers.models.Normalize":
			te.normalize = true
		default:
			return nil, fmt.Errorf("modules.json: module %q is not supported by text_embedding (Transformer, Pooling and Normalize are)", m.Type)
		}
	}
	if pooling == "" {
		return nil, fmt.Errorf("modules.json has no sentence_transformers.models.Pooling module")
	}
	var pc struct {
		Dim          int  `json:"word_embedding_dimension"`
		CLS          bool `json:"pooling_mode_cls_token"`
		Mean         bool `json:"pooling_mode_mean_tokens"`
		Max          bool `json:"pooling_mode_max_tokens"`
		MeanSqrtLen  bool `json:"pooling_mode_mean_sqrt_len_tokens"`
		WeightedMean bool `json:"pooling_mode_weightedmean_tokens"`
		LastToken    bool `json:"pooling_mode_lasttoken"`
	}
	if err := readArchiveJSON(ctx.Dir, pooling, &pc); err != nil {
		return nil, err
	}
	modes := 0
	for _, m := range []struct {
		on   bool
		name string
	}{{pc.CLS, "cls"}, {pc.Mean, "mean"}, {pc.Max, "max"}} {
		if m.on {
			te.pooling = m.name
			modes++
		}
	}
	if modes != 1 || pc.MeanSqrtLen || pc.WeightedMean || pc.LastToken || pc.Dim < 1 {
		return nil, fmt.Errorf("%s: text_embedding pools with exactly one of cls, mean or max tokens, and needs word_embedding_dimension", pooling)
	}
	te.dim = pc.Dim

	var sb struct {
		MaxSeqLength int  `json:"max_seq_length"`
		DoLowerCase  bool `json:"do_lower_case"`
	}
	if err := readArchiveJSON(ctx.Dir, "sentence_bert_config.json", &sb); err != nil {
		return nil, err
	}
	if sb.MaxSeqLength < 2 {
		return nil, fmt.Errorf("sentence_bert_config.json: max_seq_length must be ≥ 2 ([CLS] and [SEP]), got %d", sb.MaxSeqLength)
	}
	if sb.DoLowerCase {
		return nil, fmt.Errorf("sentence_bert_config.json: do_lower_case true is not supported by text_embedding")
	}
	te.maxLen = sb.MaxSeqLength

	// Refusing over-long text needs to see one id past the limit.
	limit := te.maxLen
	if !truncate {
		limit++
	}
	te.tok, err = loadTokenizer(ctx, text.Options{Lowercase: lowercase, MaxLength: limit, HuggingFace: true})
	if err != nil {
		return nil, err
	}
	return te, nil
}

func readArchiveJSON(dir, name string, v any) error {
	f, err := os.OpenInRoot(dir, name)
	if err != nil {
		return fmt.Errorf("text_embedding needs the sentence-transformers file %s in the archive: %w", name, err)
	}
	defer f.Close()
	if err := json.NewDecoder(f).Decode(v); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// Dim is the length of the embeddings.
func (te *TextEmbedding) Dim() int { return te.dim }

// MaxSeqLength is the most ids one input may have, [CLS] and [SEP] included.
func (te *TextEmbedding) MaxSeqLength() int { return te.maxLen }

// embedState is a sample's token ids, one sequence per input; Infer pads them.
type embedState struct{ ids [][]int64 }

// Tokens is the number of ids the sample's inputs gave the model, padding left out.
func (te *TextEmbedding) Tokens(s *Sample) int {
	st, _ := s.State.(embedState)
	n := 0
	for _, ids := range st.ids {
		n += len(ids)
	}
	return n
}

// Preprocess reads the request's inputs: a raw body or form field is one text; JSON may be a
// string, an array of strings, an array of token ids (one input, [CLS] and [SEP] included,
// as the model's tokenizer gives them), an array of such arrays, or {"input": ...}
// ({"text"}, {"data"}) holding one of these.
func (te *TextEmbedding) Preprocess(r *Request) (*Sample, error) {
	var st embedState
	for _, p := range r.Inputs {
		if !utf8.Valid(p.Data) {
			return nil, BadInput("input %q is not valid UTF-8", p.Name)
		}
		if !isJSON(p) {
			ids, err := te.encode(string(p.Data), len(st.ids))
			if err != nil {
				return nil, err
			}
			st.ids = append(st.ids, ids)
			continue
		}
		var v any
		if err := json.Unmarshal(p.Data, &v); err != nil {
			return nil, BadInput("invalid JSON body: %v", err)
		}
		if m, ok := v.(map[string]any); ok {
			v = nil
			for _, k := range []string{"input", "text", "data"} {
				if e, ok := m[k]; ok {
					v = e
					break
				}
			}
			if v == nil {
				return nil, BadInput(`JSON input must be a string, an array of strings or of token ids, or {"input": ...}`)
			}
		}
		var err error
		if st.ids, err = te.appendJSON(st.ids, v, 0); err != nil {
			return nil, err
		}
	}
	return te.sample(st)
}

// TextSample is Preprocess for texts given one by one, as the Open Inference Protocol's
// BYTES elements.
func (te *TextEmbedding) TextSample(texts []string) (*Sample, error) {
	var st embedState
	for _, t := range texts {
		ids, err := te.encode(t, len(st.ids))
		if err != nil {
			return nil, err
		}
		st.ids = append(st.ids, ids)
	}
	return te.sample(st)
}

func (te *TextEmbedding) sample(st embedState) (*Sample, error) {
	if len(st.ids) == 0 {
		return nil, BadInput("the request has no input")
	}
	if len(st.ids) > te.maxTexts {
		return nil, BadInput("the request has %d inputs, over max_texts (%d): send them in several requests", len(st.ids), te.maxTexts)
	}
	return &Sample{Items: len(st.ids), State: st}, nil
}

func (te *TextEmbedding) appendJSON(seqs [][]int64, v any, depth int) ([][]int64, error) {
	switch x := v.(type) {
	case string:
		ids, err := te.encode(x, len(seqs))
		if err != nil {
			return nil, err
		}
		return append(seqs, ids), nil
	case []any:
		if len(x) == 0 {
			return nil, BadInput("input %d is an empty array", len(seqs))
		}
		if _, ok := x[0].(float64); ok {
			ids, err := te.tokenIDs(x, len(seqs))
			if err != nil {
				return nil, err
			}
			return append(seqs, ids), nil
		}
		if depth > 0 {
			return nil, BadInput("input %d must be a string or an array of token ids", len(seqs))
		}
		for _, e := range x {
			var err error
			if seqs, err = te.appendJSON(seqs, e, depth+1); err != nil {
				return nil, err
			}
		}
		return seqs, nil
	case map[string]any:
		return nil, BadInput(`JSON input must be a string, an array of strings or of token ids, or {"input": ...}`)
	default:
		return nil, BadInput("input %d must be a string or an array of token ids, got %s", len(seqs), jsonType(v))
	}
}

func jsonType(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case float64, json.Number:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return "a value of another kind"
}

// encode tokenizes input i, cutting or refusing it past max_seq_length as configured.
func (te *TextEmbedding) encode(s string, i int) ([]int64, error) {
	if strings.TrimSpace(s) == "" {
		return nil, BadInput("input %d is empty", i)
	}
	ids := te.tok.Encode(s)
	if len(ids) > te.maxLen {
		return nil, BadInput("input %d is over the model's max_seq_length of %d tokens; shorten it", i, te.maxLen)
	}
	return ids, nil
}

// tokenIDs reads one input given as token ids. They are the model's input as they are:
// never cut, since cutting would drop the [SEP] the model was trained to see.
func (te *TextEmbedding) tokenIDs(x []any, i int) ([]int64, error) {
	if len(x) > te.maxLen {
		return nil, BadInput("input %d has %d token ids, over the model's max_seq_length of %d", i, len(x), te.maxLen)
	}
	ids := make([]int64, len(x))
	for j, e := range x {
		f, ok := e.(float64)
		if !ok || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
			return nil, BadInput("input %d: token ids must be integers, got %v at position %d", i, e, j)
		}
		ids[j] = int64(f)
	}
	if err := te.tok.Check(ids); err != nil {
		return nil, BadInput("input %d: %v", i, err)
	}
	return ids, nil
}

// WarmupSample is one short sentence.
func (te *TextEmbedding) WarmupSample() *Sample {
	return &Sample{Items: 1, State: embedState{ids: [][]int64{te.tok.Encode("a short sentence to warm up.")}}}
}

// Infer pads the batch's sequences to its longest, runs forward(input_ids, attention_mask)
// once, and pools each sequence over its own tokens, so padding changes nothing.
func (te *TextEmbedding) Infer(m torch.Model, batch []*Sample) ([][]Tensor, error) {
	var seqs [][]int64
	for _, s := range batch {
		st, ok := s.State.(embedState)
		if !ok || len(st.ids) != s.Items {
			return nil, BadInput("text_embedding takes text or token ids")
		}
		seqs = append(seqs, st.ids...)
	}
	ids, mask, width := te.tok.Batch(seqs)
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
	h, err := firstTensor(out)
	if err != nil {
		return nil, fmt.Errorf("text_embedding: %v, want token embeddings (or a tuple that starts with them)", err)
	}
	c, err := h.ToCPU()
	if err != nil {
		return nil, err
	}
	if c != h {
		defer c.Close()
	}
	shape := c.Shape()
	if len(shape) != 3 || shape[0] != n || shape[1] != int64(width) || shape[2] != int64(te.dim) {
		return nil, fmt.Errorf("text_embedding: the model returned %v, want token embeddings [%d, %d, %d]", shape, n, width, te.dim)
	}
	tokens, err := torch.Data[float32](c)
	if err != nil {
		return nil, err
	}
	res := make([][]Tensor, len(batch))
	row := 0
	for i, s := range batch {
		data := make([]byte, 4*s.Items*te.dim)
		for j := range s.Items {
			seq := tokens[row*width*te.dim : (row*width+len(seqs[row]))*te.dim]
			te.pool(data[4*j*te.dim:4*(j+1)*te.dim], seq)
			row++
		}
		res[i] = []Tensor{{DType: torch.Float32, Shape: []int64{int64(s.Items), int64(te.dim)}, Data: data}}
	}
	return res, nil
}

// pool writes one sequence's embedding (little-endian float32) from its tokens' [len, dim].
func (te *TextEmbedding) pool(dst []byte, seq []float32) {
	v := make([]float64, te.dim)
	count := len(seq) / te.dim
	switch te.pooling {
	case "cls":
		for k := range v {
			v[k] = float64(seq[k])
		}
	case "max":
		for k := range v {
			v[k] = math.Inf(-1)
		}
		for t := range count {
			for k := range v {
				v[k] = max(v[k], float64(seq[t*te.dim+k]))
			}
		}
	default: // mean
		for t := range count {
			for k := range v {
				v[k] += float64(seq[t*te.dim+k])
			}
		}
		for k := range v {
			v[k] /= float64(count)
		}
	}
	if te.normalize {
		// torch.nn.functional.normalize: v / max(‖v‖, 1e-12).
		norm := 0.0
		for _, x := range v {
			norm += x * x
		}
		norm = max(math.Sqrt(norm), 1e-12)
		for k := range v {
			v[k] /= norm
		}
	}
	for k, x := range v {
		binary.LittleEndian.PutUint32(dst[4*k:], math.Float32bits(float32(x)))
	}
}

// Postprocess answers a JSON array with one embedding (an array of dim numbers) per input.
func (te *TextEmbedding) Postprocess(s *Sample, out []Tensor) (*Response, error) {
	if len(out) != 1 || out[0].DType != torch.Float32 || len(out[0].Data) != 4*s.Items*te.dim {
		return nil, fmt.Errorf("text_embedding: want float32 [%d, %d] embeddings", s.Items, te.dim)
	}
	b := make([]byte, 0, s.Items*te.dim*12)
	b = append(b, '[')
	for i := range s.Items {
		if i > 0 {
			b = append(b, ',')
		}
		b = AppendFloats(b, out[0].Data[4*i*te.dim:4*(i+1)*te.dim])
	}
	b = append(b, ']')
	return &Response{ContentType: "application/json", Body: b}, nil
}

// AppendFloats appends little-endian float32s as a JSON array, each in jsonfloat's fixed
// width.
func AppendFloats(b, data []byte) []byte {
	b = append(b, '[')
	for k := 0; k < len(data); k += 4 {
		if k > 0 {
			b = append(b, ',')
		}
		b = jsonfloat.AppendFloat32(b, math.Float32frombits(binary.LittleEndian.Uint32(data[k:])))
	}
	return append(b, ']')
}
