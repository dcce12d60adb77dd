package handlers

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"

	"github.com/torchd/torchd/internal/jsonfloat"
	"github.com/torchd/torchd/torch"
)

// Explainer is implemented by handlers that explain a prediction as TorchServe's do, with
// Captum's Integrated Gradients (POST /explanations, KServe :explain). target is the class
// explained; TorchServe's default is 0.
type Explainer interface {
	Explain(m *torch.Module, s *Sample, target int) (*Response, error)
}

// Integrated Gradients steps: TorchServe's vision handlers pass n_steps=15, and its text
// handler leaves Captum's default of 50. Both use Captum's default Gauss-Legendre path.
const (
	imageExplainSteps = 15
	textExplainSteps  = 50
)

// Explain returns Integrated Gradients of the target class from an all-zero baseline, per
// image: a [C][H][W] list for one image, a list of them for several (TorchServe's
// attributions.tolist()).
func (ic *ImageClassifier) Explain(m *torch.Module, s *Sample, target int) (*Response, error) {
	if len(s.Tensors) != 1 {
		return nil, fmt.Errorf("image_classifier: explain needs the preprocessed image tensor")
	}
	in := s.Tensors[0]
	x, err := torch.FromBytes(in.DType, in.Data, in.Shape...)
	if err != nil {
		return nil, err
	}
	defer x.Close()
	base, err := torch.FromBytes(in.DType, make([]byte, len(in.Data)), in.Shape...)
	if err != nil {
		return nil, err
	}
	defer base.Close()
	alphas, weights := torch.GaussLegendre(imageExplainSteps)
	attr, err := m.IntegratedGradients("forward", []any{x}, 0, base, alphas, weights, target)
	if err != nil {
		return nil, explainError(err)
	}
	defer attr.Close()
	vals, err := torch.Data[float32](attr)
	if err != nil {
		return nil, err
	}
	shape := attr.Shape()
	if s.Items == 1 {
		shape = shape[1:]
	}
	var b bytes.Buffer
	writeNested(&b, vals, shape)
	return &Response{ContentType: "application/json", Body: b.Bytes()}, nil
}

// explainError makes a target outside the model's classes the client's error.
func explainError(err error) error {
	if msg := err.Error(); bytes.Contains([]byte(msg), []byte("is not a class of the model")) {
		return BadInput("%s", msg)
	}
	return err
}

// writeNested writes vals as nested JSON lists of shape.
func writeNested(b *bytes.Buffer, vals []float32, shape []int64) {
	if len(shape) == 0 {
		b.Write(jsonfloat.AppendFloat32(b.AvailableBuffer(), vals[0]))
		return
	}
	stride := 1
	for _, d := range shape[1:] {
		stride *= int(d)
	}
	b.WriteByte('[')
	for i := range int(shape[0]) {
		if i > 0 {
			b.WriteString(", ")
		}
		writeNested(b, vals[i*stride:(i+1)*stride], shape[1:])
	}
	b.WriteByte(']')
}

// textExplanation is TorchServe's text explanation: one importance per token.
type textExplanation struct {
	Importances []float64 `json:"importances"`
	Words       []string  `json:"words"`
}

// Explain returns, per text, Integrated Gradients of the target class with respect to the
// token embeddings, from the embeddings of an all-[PAD] text (TorchServe's reference),
// summed over the embedding and scaled to unit norm: {"importances", "words"}. The model
// must export embed(input_ids) and forward_embedded(tokens, attention_mask) (models/textcls.py).
func (tc *TextClassifier) Explain(m *torch.Module, s *Sample, target int) (*Response, error) {
	seqs, err := tc.sampleSequences(s)
	if err != nil {
		return nil, err
	}
	var out []textExplanation
	for _, ids := range seqs {
		e, err := tc.explainOne(m, ids, target)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	var body []byte
	if len(out) == 1 {
		body, err = json.MarshalIndent(out[0], "", "  ")
	} else {
		body, err = json.MarshalIndent(out, "", "  ")
	}
	if err != nil {
		return nil, err
	}
	return &Response{ContentType: "application/json", Body: body}, nil
}

func (tc *TextClassifier) explainOne(m *torch.Module, ids []int64, target int) (textExplanation, error) {
	n := int64(len(ids))
	mask, pad := make([]int64, n), make([]int64, n)
	for i := range mask {
		mask[i], pad[i] = 1, tc.tok.PadID()
	}
	embed := func(v []int64) (*torch.Tensor, error) {
		t, err := torch.NewTensor(v, 1, n)
		if err != nil {
			return nil, err
		}
		defer t.Close()
		out, err := m.Run("embed", t)
		if err != nil {
			return nil, fmt.Errorf("text_classifier: explain needs the model's embed(input_ids) method: %w", err)
		}
		e, ok := out.(*torch.Tensor)
		if !ok {
			torch.CloseValue(out)
			return nil, fmt.Errorf("text_classifier: embed returned %s, want a tensor", torch.TypeName(out))
		}
		return e, nil
	}
	x, err := embed(ids)
	if err != nil {
		return textExplanation{}, err
	}
	defer x.Close()
	base, err := embed(pad)
	if err != nil {
		return textExplanation{}, err
	}
	defer base.Close()
	maskT, err := torch.NewTensor(mask, 1, n)
	if err != nil {
		return textExplanation{}, err
	}
	defer maskT.Close()
	alphas, weights := torch.GaussLegendre(textExplainSteps)
	attr, err := m.IntegratedGradients("forward_embedded", []any{x, maskT}, 0, base, alphas, weights, target)
	if err != nil {
		return textExplanation{}, explainError(err)
	}
	defer attr.Close()
	vals, err := torch.Data[float32](attr)
	if err != nil {
		return textExplanation{}, err
	}
	dim := len(vals) / len(ids)
	e := textExplanation{Importances: make([]float64, len(ids)), Words: make([]string, len(ids))}
	norm := 0.0
	for i := range ids {
		sum := 0.0
		for _, v := range vals[i*dim : (i+1)*dim] {
			sum += float64(v)
		}
		e.Importances[i] = sum
		norm += sum * sum
		e.Words[i] = tc.tok.Token(ids[i])
	}
	if norm = math.Sqrt(norm); norm > 0 {
		for i := range e.Importances {
			e.Importances[i] /= norm
		}
	}
	return e, nil
}
