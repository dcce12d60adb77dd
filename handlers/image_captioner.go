package handlers

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"

	"github.com/torchd/torchd/handlers/vision"
	"github.com/torchd/torchd/torch"
)

func init() { Register("image_captioner", newImageCaptioner) }

// ImageCaptioner serves encoder-decoder captioners: image bytes → exact resize, Normalize →
// the model's scripted generate(images, max_length) → token ids → {"caption": "..."}.
//
// The model decodes the whole batch itself, so generate must return int64 ids [N, T]: each
// row the caption's tokens, then the end token, then padding. Options (model-config.toml
// [options]): width and height (the model's input size; required), mean and std (ImageNet's),
// vocab (the archive's vocabulary, "vocab.json"), max_length (tokens generated at most, 32),
// max_images (64, per request), max_request_pixels (400 M, per request), encoder (none),
// jpeg_dct_scaling (false, as image_classifier).
//
// encoder names an AOTInductor package in the archive (models/pt2.py's encoder.pt2) that
// computes the features from the images in place of the model's own encoder; the scripted
// decode(features, max_length) then runs the decoding loop, which torch.export cannot take.
type ImageCaptioner struct {
	transform vision.Transform
	vocab     captionVocab
	maxLen    int
	limits    imageLimits
	h, w      int
	file      string // the config file, for errors
	encoder   string // the encoder package's path; "" when the model encodes itself
}

// captionVocab is the vocabulary file: {"itos": ["<pad>", "<bos>", "<eos>", "a", ...],
// "pad": 0, "bos": 1, "eos": 2}, itos[id] being the word of token id. Pointers tell a
// missing key from id 0.
type captionVocab struct {
	ITOS []string `json:"itos"`
	PAD  *int64   `json:"pad"`
	BOS  *int64   `json:"bos"`
	EOS  *int64   `json:"eos"`
}

func newImageCaptioner(ctx Context) (Handler, error) {
	cfg := ctx.Config
	opts := intOptions{cfg: &cfg}
	get := opts.get
	w, h := get("width", 0), get("height", 0)
	maxLen := get("max_length", 32)
	limits, err := readImageLimits(&opts)
	if err != nil {
		return nil, err
	}
	if opts.err != nil {
		return nil, opts.err
	}
	if w < 1 || h < 1 {
		return nil, fmt.Errorf("%s: options width and height must be set to the model's input size, got %dx%d", cfg.File, w, h)
	}
	if maxLen < 1 {
		return nil, fmt.Errorf("%s: option max_length must be ≥ 1, got %d", cfg.File, maxLen)
	}
	def := vision.DefaultTransform()
	mean, err := cfg.FloatsOption("mean", floats64(def.Mean))
	if err != nil {
		return nil, err
	}
	std, err := cfg.FloatsOption("std", floats64(def.Std))
	if err != nil {
		return nil, err
	}
	if len(mean) != 3 || len(std) != 3 {
		return nil, fmt.Errorf("%s: options mean and std need 3 values (RGB), got %d and %d", cfg.File, len(mean), len(std))
	}
	// Checked here so that a config at odds with itself fails registration, not every request.
	if len(cfg.Inputs) > 0 {
		in := cfg.Inputs[0]
		want := []int64{-1, 3, int64(h), int64(w)}
		if len(cfg.Inputs) != 1 || in.DType != "float32" || in.Shape != nil && !slices.Equal(in.Shape, want) {
			return nil, fmt.Errorf("%s: the captioner takes one float32 input of shape %v; the config declares %d inputs, the first %s %v", cfg.File, want, len(cfg.Inputs), in.DType, in.Shape)
		}
	}
	name, err := cfg.StringOption("vocab", "vocab.json")
	if err != nil {
		return nil, err
	}
	vf, err := openArchiveFile(ctx, "vocab", name)
	if err != nil {
		return nil, err
	}
	vocab, err := readCaptionVocab(vf, name)
	vf.Close()
	if err != nil {
		return nil, fmt.Errorf("%s: option vocab: %w", cfg.File, err)
	}
	encoder, err := cfg.StringOption("encoder", "")
	if err != nil {
		return nil, err
	}
	if encoder != "" {
		// Opened inside the archive, as the vocabulary: the name comes from an untrusted archive.
		f, err := openArchiveFile(ctx, "encoder", encoder)
		if err != nil {
			return nil, err
		}
		f.Close()
		encoder = filepath.Join(ctx.Dir, encoder)
	}
	t := vision.Transform{Width: w, Height: h, Mean: floats32(mean), Std: floats32(std)}
	if err := readJPEGScaling(&cfg, &t); err != nil {
		return nil, err
	}
	return &ImageCaptioner{transform: t, vocab: vocab, maxLen: maxLen, limits: limits, h: h, w: w,
		file: cfg.File, encoder: encoder}, nil
}

// BindModel loads the encoder package, when option encoder names one, beside the TorchScript
// model, and returns the two as the model the workers run. The package must take the
// images the handler makes: one float32 input [-1, 3, height, width].
func (c *ImageCaptioner) BindModel(m torch.Model, runners int) (torch.Model, error) {
	if c.encoder == "" {
		return m, nil
	}
	dec, ok := m.(*torch.Module)
	if !ok {
		return nil, fmt.Errorf("%s: option encoder: the model must be TorchScript with a decode method, not an AOTInductor package", c.file)
	}
	if _, err := dec.Schema("decode"); err != nil {
		return nil, fmt.Errorf("%s: option encoder: the TorchScript model has no decode(features, max_length) method: %w", c.file, err)
	}
	p, err := torch.LoadPackage(c.encoder, torch.WithPackageDevice(dec.Device()), torch.WithRunners(runners))
	if err != nil {
		return nil, fmt.Errorf("%s: option encoder: %w", c.file, err)
	}
	want := []int64{-1, 3, int64(c.h), int64(c.w)}
	if in := p.Inputs(); len(in) != 1 || in[0].DType != "float32" || !slices.Equal(in[0].Shape, want) {
		p.Close()
		takes := make([]string, len(in))
		for i, s := range in {
			takes[i] = fmt.Sprintf("%s %v", s.DType, s.Shape)
		}
		return nil, fmt.Errorf("%s: option encoder: %s must take one float32 input of shape %v, it takes %v",
			c.file, filepath.Base(c.encoder), want, takes)
	}
	return &encodedCaptioner{encoder: p, decoder: dec, maxLen: int64(c.maxLen)}, nil
}

// encodedCaptioner is a captioner whose encoder is an AOTInductor package: the images go
// through it in parts of at most its batch maximum, their features through the TorchScript
// model's decode. It owns both.
type encodedCaptioner struct {
	encoder *torch.Package
	decoder *torch.Module
	maxLen  int64
}

// Forward captions images [N, 3, H, W] (on the CPU) into token ids [N, T], as generate does.
func (m *encodedCaptioner) Forward(args ...any) (any, error) {
	var x *torch.Tensor
	if len(args) == 1 {
		x, _ = args[0].(*torch.Tensor)
	}
	if x == nil || !x.OnCPU() || len(x.Shape()) == 0 {
		return nil, errors.New("image_captioner: the captioner takes one CPU tensor of images [N, 3, H, W]")
	}
	feat, err := m.encode(x)
	if err != nil {
		return nil, err
	}
	defer feat.Close()
	return m.decoder.Run("decode", feat, m.maxLen)
}

// encode runs the encoder on x's rows, in parts when there are more than it was exported for.
func (m *encodedCaptioner) encode(x *torch.Tensor) (*torch.Tensor, error) {
	shape := x.Shape()
	n := shape[0]
	_, hi := m.encoder.BatchRange()
	if n <= hi {
		return m.encodePart(x)
	}
	data := x.Bytes()
	row := int64(len(data)) / n
	var feats []byte
	var dims []int64
	for start := int64(0); start < n; start += hi {
		k := min(hi, n-start)
		part, err := torch.FromBytes(x.DType(), data[start*row:(start+k)*row], append([]int64{k}, shape[1:]...)...)
		if err != nil {
			return nil, err
		}
		f, err := m.encodePart(part)
		if err != nil {
			return nil, err
		}
		c, err := f.ToCPU()
		if err != nil {
			f.Close()
			return nil, err
		}
		feats, dims = append(feats, c.Bytes()...), c.Shape()[1:]
		c.Close()
		f.Close()
	}
	return torch.FromBytes(torch.Float32, feats, append([]int64{n}, dims...)...)
}

func (m *encodedCaptioner) encodePart(x *torch.Tensor) (*torch.Tensor, error) {
	out, err := m.encoder.Forward(x)
	if err != nil {
		return nil, err
	}
	if f, ok := out.(*torch.Tensor); ok && f.DType() == torch.Float32 && len(f.Shape()) == 2 {
		return f, nil
	}
	torch.CloseValue(out)
	return nil, fmt.Errorf("image_captioner: the encoder must return float32 features [N, F], got %v", out)
}

// Device is the TorchScript model's; the package was loaded on the same one.
func (m *encodedCaptioner) Device() string { return m.decoder.Device() }

// Close closes the package and the TorchScript model.
func (m *encodedCaptioner) Close() error { return errors.Join(m.encoder.Close(), m.decoder.Close()) }

// readCaptionVocab reads and checks the vocabulary file name, opened as f.
func readCaptionVocab(f io.Reader, name string) (captionVocab, error) {
	var v captionVocab
	b, err := io.ReadAll(f)
	if err != nil {
		return v, err
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return v, fmt.Errorf("%s: %w", name, err)
	}
	if len(v.ITOS) == 0 {
		return v, fmt.Errorf(`%s: "itos" must list the words by token id`, name)
	}
	for _, k := range []struct {
		key string
		id  *int64
	}{{"pad", v.PAD}, {"bos", v.BOS}, {"eos", v.EOS}} {
		if k.id == nil || *k.id < 0 || *k.id >= int64(len(v.ITOS)) {
			return v, fmt.Errorf("%s: %q must be a token id in [0, %d)", name, k.key, len(v.ITOS))
		}
	}
	return v, nil
}

// Preprocess decodes every image of the request into one [N, 3, H, W] tensor.
func (c *ImageCaptioner) Preprocess(r *Request) (*Sample, error) {
	return imageSample(r, c.transform, c.limits)
}

// WarmupSample is a black image of the model's input shape.
func (c *ImageCaptioner) WarmupSample() *Sample { return blankImage(c.transform) }

// Infer runs the batch through generate, not forward (or, with an encoder package, through
// the package and then decode): the decoding loop is the model's, so one call captions every
// image of the batch.
func (c *ImageCaptioner) Infer(model torch.Model, batch []*Sample) ([][]Tensor, error) {
	// generate is a TorchScript method; a .pt2 package has only forward.
	var run func(x *torch.Tensor) (any, error)
	switch m := model.(type) {
	case *encodedCaptioner:
		run = func(x *torch.Tensor) (any, error) { return m.Forward(x) }
	case *torch.Module:
		if c.encoder != "" {
			return nil, errors.New("image_captioner: option encoder is set, but the model was not bound to its package (handlers.Bind)")
		}
		run = func(x *torch.Tensor) (any, error) { return m.Run("generate", x, int64(c.maxLen)) }
	default:
		return nil, errors.New("image_captioner: the model must be TorchScript with a generate method, not an AOTInductor package")
	}
	rowBytes := 3 * c.h * c.w * 4
	total := 0
	for _, s := range batch {
		if len(s.Tensors) != 1 || len(s.Tensors[0].Data) != s.Items*rowBytes {
			return nil, fmt.Errorf("image_captioner: a sample is not %d images of 3×%d×%d", s.Items, c.h, c.w)
		}
		total += s.Items
	}
	if total == 0 {
		return make([][]Tensor, len(batch)), nil
	}
	data := batch[0].Tensors[0].Data
	if len(batch) > 1 {
		bp := batchBuffers.Get().(*[]byte)
		defer batchBuffers.Put(bp)
		*bp = (*bp)[:0]
		for _, s := range batch {
			*bp = append(*bp, s.Tensors[0].Data...)
		}
		data = *bp
	}
	x, err := torch.FromBytes(torch.Float32, data, int64(total), 3, int64(c.h), int64(c.w))
	if err != nil {
		return nil, err
	}
	out, err := run(x)
	if err != nil {
		return nil, err
	}
	defer torch.CloseValue(out)
	ids, ok := out.(*torch.Tensor)
	if !ok || ids.DType() != torch.Int64 || len(ids.Shape()) != 2 {
		return nil, fmt.Errorf("image_captioner: generate must return int64 token ids [N, T], got %v", out)
	}
	return Split([]*torch.Tensor{ids}, batch, total)
}

type caption struct {
	Caption string `json:"caption"`
}

// Postprocess returns {"caption": "..."} per image; several images give a JSON array.
func (c *ImageCaptioner) Postprocess(s *Sample, out []Tensor) (*Response, error) {
	if len(out) != 1 || out[0].DType != torch.Int64 || len(out[0].Shape) != 2 || out[0].Shape[0] != int64(s.Items) {
		return nil, errors.New("image_captioner: the model must return int64 token ids of shape [N, T]")
	}
	steps := int(out[0].Shape[1])
	caps := make([]caption, s.Items)
	for i := range caps {
		text, err := c.vocab.words(out[0].Data[8*i*steps : 8*(i+1)*steps])
		if err != nil {
			return nil, err
		}
		caps[i].Caption = text
	}
	var v any = caps
	if s.Items == 1 {
		v = caps[0]
	}
	body, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return nil, err
	}
	return &Response{ContentType: "application/json", Body: append(body, '\n')}, nil
}

// words turns one row of little-endian int64 ids into text: up to the end token, without
// start or padding tokens, joined by spaces.
func (v captionVocab) words(row []byte) (string, error) {
	var words []string
	for off := 0; off+8 <= len(row); off += 8 {
		id := int64(binary.LittleEndian.Uint64(row[off:]))
		switch {
		case id == *v.EOS:
			return strings.Join(words, " "), nil
		case id == *v.PAD || id == *v.BOS:
		case id < 0 || id >= int64(len(v.ITOS)):
			return "", fmt.Errorf("image_captioner: the model returned token id %d; the vocabulary has %d", id, len(v.ITOS))
		default:
			words = append(words, v.ITOS[id])
		}
	}
	return strings.Join(words, " "), nil
}
