package handlers

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/handlers/vision"
	"github.com/torchd/torchd/internal/jsonfloat"
	"github.com/torchd/torchd/torch"
)

func init() { Register("image_classifier", newImageClassifier) }

// ImageClassifier is TorchServe's image_classifier: image bytes → Resize, CenterCrop,
// Normalize → forward → softmax → top-k {label: probability}.
//
// Options (model-config.toml [options]): resize (256), crop_size (224), width and height
// (exact resize instead of resize+crop), mean and std (ImageNet's), color ("rgb" or "gray"),
// top_k (5), max_pixels (40 M, per image), max_images (64, per request), max_request_pixels
// (400 M, per request), jpeg_dct_scaling (false: every JPEG decoded at full size, as PIL and
// TorchServe; true opts into decoding large JPEGs scaled in the DCT domain).
type ImageClassifier struct {
	transform vision.Transform
	topK      int
	limits    imageLimits
	labels    map[int]string
}

func newImageClassifier(ctx Context) (Handler, error) {
	cfg := ctx.Config
	opts := intOptions{cfg: &cfg}
	t, err := readImageTransform(&opts)
	if err != nil {
		return nil, err
	}
	topK := opts.get("top_k", 5)
	limits, err := readImageLimits(&opts)
	if err != nil {
		return nil, err
	}
	if topK < 1 {
		return nil, fmt.Errorf("%s: option top_k must be ≥ 1, got %d", cfg.File, topK)
	}
	return &ImageClassifier{transform: t, topK: topK, limits: limits, labels: ctx.Labels}, nil
}

// readImageTransform reads the options of TorchServe's image preprocessing (resize,
// crop_size, width and height, max_pixels, color, mean and std, jpeg_dct_scaling) over its
// defaults: Resize(256), CenterCrop(224), ImageNet's mean and std, RGB, every JPEG decoded at
// full size.
func readImageTransform(opts *intOptions) (vision.Transform, error) {
	cfg := opts.cfg
	t := vision.DefaultTransform()
	get := opts.get
	t.Resize = get("resize", t.Resize)
	crop := get("crop_size", get("image_size", t.CropW))
	t.CropW, t.CropH = crop, crop
	t.Width, t.Height = get("width", 0), get("height", 0)
	t.MaxPixels = get("max_pixels", 0)
	if opts.err != nil {
		return t, opts.err
	}
	if t.Width > 0 || t.Height > 0 {
		t.Resize, t.CropW, t.CropH = 0, 0, 0
	}
	if err := readColor(cfg, &t); err != nil {
		return t, err
	}
	if err := readJPEGScaling(cfg, &t); err != nil {
		return t, err
	}
	_, h, w := t.OutputShape()
	if h == 0 || w == 0 {
		return t, fmt.Errorf("%s: the image needs a crop_size or a width and height", cfg.File)
	}
	return t, nil
}

// readJPEGScaling reads the option jpeg_dct_scaling. Off by default, because TorchServe's
// handlers decode every JPEG whole and a model's answer must equal theirs; true lets a JPEG at
// least twice the resize target be decoded at 1/2, 1/4 or 1/8 size in the DCT domain.
func readJPEGScaling(cfg *archive.ModelConfig, t *vision.Transform) error {
	scaling, err := cfg.BoolOption("jpeg_dct_scaling", false)
	if err != nil {
		return err
	}
	t.JPEGDCTScaling = scaling
	return nil
}

// readColor reads the options color ("rgb" or "gray"), mean and std into t; mean and std
// default to t's own (0.5 for gray), and where t has none, to none (ToTensor only).
func readColor(cfg *archive.ModelConfig, t *vision.Transform) error {
	color, err := cfg.StringOption("color", "rgb")
	if err != nil {
		return err
	}
	switch color {
	case "rgb":
	case "gray", "grayscale", "l":
		t.Gray = true
	default:
		return fmt.Errorf("%s: option color must be \"rgb\" or \"gray\", got %q", cfg.File, color)
	}
	c := 3
	if t.Gray {
		c = 1
	}
	defMean, defStd := floats64(t.Mean), floats64(t.Std)
	if t.Gray && t.Mean != nil {
		defMean, defStd = []float64{0.5}, []float64{0.5}
	}
	mean, err := cfg.FloatsOption("mean", defMean)
	if err != nil {
		return err
	}
	std, err := cfg.FloatsOption("std", defStd)
	if err != nil {
		return err
	}
	if t.Mean == nil && len(mean) == 0 && len(std) == 0 {
		return nil
	}
	if len(mean) != c || len(std) != c {
		return fmt.Errorf("%s: options mean and std need %d values for color %q, got %d and %d", cfg.File, c, color, len(mean), len(std))
	}
	for _, v := range std {
		if v == 0 {
			return fmt.Errorf("%s: option std has a zero", cfg.File)
		}
	}
	t.Mean, t.Std = floats32(mean), floats32(std)
	return nil
}

func floats64(f []float32) []float64 {
	out := make([]float64, len(f))
	for i, v := range f {
		out[i] = float64(v)
	}
	return out
}

func floats32(f []float64) []float32 {
	out := make([]float32, len(f))
	for i, v := range f {
		out[i] = float32(v)
	}
	return out
}

// float32Bytes views a []float32 as its little-endian bytes (the machine's order on every
// platform LibTorch supports here).
func float32Bytes(f []float32) []byte {
	if len(f) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&f[0])), 4*len(f))
}

// Preprocess decodes every image of the request into one [N, C, H, W] tensor.
func (ic *ImageClassifier) Preprocess(r *Request) (*Sample, error) {
	return imageSample(r, ic.transform, ic.limits)
}

// PreprocessTensor takes images already transformed, as TorchServe's vision handlers take a
// list: float32 [C, H, W] for one image or [N, C, H, W], of the model's input shape.
func (ic *ImageClassifier) PreprocessTensor(t Tensor) (*Sample, error) {
	return transformedImages(t, ic.transform)
}

// transformedImages checks t against t's transform output shape and gives it a leading
// image dimension.
func transformedImages(t Tensor, tr vision.Transform) (*Sample, error) {
	c, h, w := tr.OutputShape()
	if len(t.Shape) == 3 {
		t.Shape = append([]int64{1}, t.Shape...)
	}
	if t.DType != torch.Float32 || len(t.Shape) != 4 || t.Shape[0] < 1 || t.Shape[1] != int64(c) || t.Shape[2] != int64(h) || t.Shape[3] != int64(w) {
		return nil, BadInput("a tensor input must be float32 [%d, %d, %d] or [N, %d, %d, %d] (the transformed image), got %v %v", c, h, w, c, h, w, t.DType, t.Shape)
	}
	if int64(len(t.Data)) != 4*t.Numel() {
		return nil, BadInput("tensor input: %d bytes for shape %v", len(t.Data), t.Shape)
	}
	return &Sample{Items: int(t.Shape[0]), Tensors: []Tensor{t}}, nil
}

// WarmupSample is a black image of the model's input shape.
func (ic *ImageClassifier) WarmupSample() *Sample { return blankImage(ic.transform) }

// defaultMaxImages is the max_images option's default. The limit exists because a request
// of many tiny images is a decompression bomb of its own: a 67-byte PNG becomes a 600 KB
// tensor for ResNet-18, so a 6 MB request of them would allocate tens of gigabytes.
const defaultMaxImages = 64

// defaultMaxRequestPixels is the max_request_pixels option's default: the decode work one
// request may ask for, summed over its images. max_pixels bounds one image and max_images
// their number, but 60 images of 36 Mpx each stay under both and took 21 s of decoding;
// 400 M is ten images at the max_pixels limit, or over thirty 12-Mpx photos.
const defaultMaxRequestPixels = 400_000_000

// imageLimits bound what one request of images may cost.
type imageLimits struct{ maxImages, maxRequestPixels int }

// readImageLimits reads the max_images and max_request_pixels options.
func readImageLimits(opts *intOptions) (imageLimits, error) {
	return readImageLimitsOver(opts, defaultMaxRequestPixels)
}

// readImageLimitsOver is readImageLimits with max_request_pixels defaulting to def.
func readImageLimitsOver(opts *intOptions, def int) (imageLimits, error) {
	l := imageLimits{maxImages: opts.get("max_images", defaultMaxImages), maxRequestPixels: opts.get("max_request_pixels", def)}
	if opts.err != nil {
		return l, opts.err
	}
	if l.maxImages < 1 {
		return l, fmt.Errorf("%s: option max_images must be ≥ 1, got %d", opts.cfg.File, l.maxImages)
	}
	if l.maxRequestPixels < 1 {
		return l, fmt.Errorf("%s: option max_request_pixels must be ≥ 1, got %d", opts.cfg.File, l.maxRequestPixels)
	}
	return l, nil
}

// imageSample decodes and transforms every image of the request into one [N, C, H, W]
// float32 tensor; it is the preprocessing of every image handler. The images' headers are
// read first, so that a request over its limits is refused before any decoding; between
// images it stops if the client has gone.
func imageSample(r *Request, t vision.Transform, l imageLimits) (*Sample, error) {
	images, err := imagePayloads(r)
	if err != nil {
		return nil, err
	}
	c, h, w := t.OutputShape()
	per := c * h * w
	// An image over max_pixels is refused before anything is decoded, with Apply's own error.
	if err := checkImageLimits(images, l, t.MaxPixels, func(i int) error { return t.Apply(images[i], make([]float32, per)) }); err != nil {
		return nil, err
	}
	buf, data, release := imageMemory(r, per, len(images))
	for i, img := range images {
		if r.Canceled != nil && r.Canceled() {
			release()
			return nil, ErrCanceled
		}
		if err := t.Apply(img, buf[i*per:(i+1)*per]); err != nil {
			release()
			return nil, imageError(i, len(images), err)
		}
	}
	return &Sample{Items: len(images), Tensors: []Tensor{{
		DType: torch.Float32, Shape: []int64{int64(len(images)), int64(c), int64(h), int64(w)}, Data: data,
	}}, Release: release}, nil
}

// imageMemory returns the floats for a request's n images of per floats each, the same
// memory as the tensor's bytes, and what gives it back: the row core lends (Request.Row)
// to a request of one image, else a pooled buffer.
func imageMemory(r *Request, per, n int) ([]float32, []byte, func()) {
	if r.Row != nil && n == 1 {
		mem, release := r.Row(4 * per)
		if mem != nil && uintptr(unsafe.Pointer(unsafe.SliceData(mem)))%4 == 0 {
			return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(mem))), per), mem, release
		}
		if release != nil {
			release()
		}
	}
	bp := imageBuffers.get(per * n)
	return *bp, float32Bytes(*bp), imageBuffers.releaser(bp)
}

// imageBuffers lends the tensors images are preprocessed into. A fresh 600 KB tensor a
// request (resnet18's 3×224×224 float32) cost its zeroing and, once the runtime had given
// the memory back to the kernel, a page fault every 4 KB; a pooled one is written over whole
// by Apply, and comes back by Sample.Release once core's worker is done with it.
var imageBuffers floatPool

// maxPooledFloats bounds a pooled buffer: 16 MiB, the tensors of 27 images of 224² (larger
// requests are rare and their buffers go to the garbage collector).
const maxPooledFloats = 4 << 20

// floatPool is a sync.Pool of float32 buffers of at least the asked length; pointers to
// slices are pooled so that a put does not allocate.
type floatPool struct{ p sync.Pool }

func (p *floatPool) get(n int) *[]float32 {
	if b, ok := p.p.Get().(*[]float32); ok {
		if cap(*b) >= n {
			*b = (*b)[:n]
			return b
		}
		// Too small: dropped, and the larger one takes its place.
	}
	b := make([]float32, n)
	return &b
}

func (p *floatPool) put(b *[]float32) {
	if cap(*b) <= maxPooledFloats {
		p.p.Put(b)
	}
}

// releaser returns b's Release: it puts b back once, however often it is called, since a
// buffer put twice would be lent to two requests at once.
func (p *floatPool) releaser(b *[]float32) func() {
	var done atomic.Bool
	return func() {
		if done.CompareAndSwap(false, true) {
			p.put(b)
		}
	}
}

// checkImageLimits refuses a request over l from the images' headers alone: more than
// max_images, more pixels in all than max_request_pixels, or an image over maxPixels (0: the
// default), which tooLarge(i) refuses with the decoder's own message.
func checkImageLimits(images [][]byte, l imageLimits, maxPixels int, tooLarge func(i int) error) error {
	if len(images) > l.maxImages {
		return BadInput("the request has %d images; this model takes at most %d per request (max_images): send them in several requests, which are batched together", len(images), l.maxImages)
	}
	perImage := int64(maxPixels)
	if perImage <= 0 {
		perImage = vision.DefaultMaxPixels
	}
	var pixels int64
	for i, img := range images {
		// A header that does not parse fails at decoding, with the image's index.
		_, iw, ih, err := vision.DecodeConfig(img)
		if err != nil {
			continue
		}
		n := int64(iw) * int64(ih)
		if n > perImage {
			return imageError(i, len(images), tooLarge(i))
		}
		pixels += n
	}
	if pixels > int64(l.maxRequestPixels) {
		return BadInput("the request's %d images have %d pixels in all; this model decodes at most %d per request (max_request_pixels): send them in several requests", len(images), pixels, l.maxRequestPixels)
	}
	return nil
}

// imageError is the client's error for image i of n.
func imageError(i, n int, err error) error {
	if n > 1 {
		return BadInput("image %d: %v", i, err)
	}
	return BadInput("%v", err)
}

// blankImage is a black image of t's output shape, for warm-up.
// channelsRE finds a convolution's complaint about its input's channels in LibTorch's error.
var channelsRE = regexp.MustCompile(`expected input\[[^\]]*\] to have (\d+) channels, but got (\d+) channels`)

// explainChannels turns a forward's channel mismatch (a one-channel model fed the RGB
// default) into a message naming the option to set.
func explainChannels(err error) error {
	m := channelsRE.FindStringSubmatch(err.Error())
	if m == nil {
		return err
	}
	var set string
	switch m[1] {
	case "1":
		set = `set color = "gray" in the model's options (model-config.toml's [options], or model-config.yaml's handler section)`
	case "3":
		set = `set color = "rgb" in the model's options (model-config.toml's [options])`
	default:
		set = `the image handlers make 1 (color = "gray") or 3 (color = "rgb")`
	}
	return &hintError{msg: fmt.Sprintf("the model takes %s-channel images and this handler makes %s-channel ones: %s", m[1], m[2], set), err: err}
}

func (ic *ImageClassifier) explainForward(err error) error { return explainChannels(err) }

func blankImage(t vision.Transform) *Sample {
	c, h, w := t.OutputShape()
	buf := make([]float32, c*h*w)
	return &Sample{Items: 1, Tensors: []Tensor{{DType: torch.Float32, Shape: []int64{1, int64(c), int64(h), int64(w)}, Data: float32Bytes(buf)}}}
}

// imagePayloads returns the request's images: raw bytes, multipart files, base64 strings in
// form fields, or JSON ({"data": b64}, {"instances": [{"b64": ...}]}, or a list of b64).
func imagePayloads(r *Request) ([][]byte, error) {
	var out [][]byte
	for _, p := range r.Inputs {
		if len(p.Data) == 0 {
			return nil, BadInput("input %q is empty", p.Name)
		}
		switch {
		case isJSON(p):
			imgs, err := jsonImages(p.Data)
			if err != nil {
				return nil, err
			}
			out = append(out, imgs...)
		case p.ContentType == "text/plain":
			b, err := base64.StdEncoding.DecodeString(string(bytes.TrimSpace(p.Data)))
			if err != nil {
				return nil, BadInput("input %q: text input must be a base64-encoded image: %v", p.Name, err)
			}
			out = append(out, b)
		default:
			out = append(out, p.Data)
		}
	}
	if len(out) == 0 {
		return nil, BadInput("the request has no image")
	}
	return out, nil
}

// eachJSONItem calls f with b's JSON value, or, when b is a list, with each of its items in
// turn (inList true). A huge list of the wrong kind is then refused at its first item,
// instead of after all of it is decoded: 3 M numbers took over a second before.
func eachJSONItem(b []byte, f func(v any, inList bool) error) error {
	if t := bytes.TrimSpace(b); len(t) == 0 || t[0] != '[' {
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			return BadInput("invalid JSON body: %v", err)
		}
		return f(v, false)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.Token() // the list's '['
	for dec.More() {
		var v any
		if err := dec.Decode(&v); errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return BadInput("invalid JSON body: unexpected end of JSON input")
		} else if err != nil {
			return BadInput("invalid JSON body: %v", err)
		}
		if err := f(v, true); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil {
		return BadInput("invalid JSON body: unexpected end of JSON input")
	}
	if _, err := dec.Token(); err != io.EOF {
		return BadInput("invalid JSON body: data after the list")
	}
	return nil
}

func isJSON(p Payload) bool {
	if bytes.HasPrefix([]byte(p.ContentType), []byte("application/json")) {
		return true
	}
	t := bytes.TrimSpace(p.Data)
	return len(t) > 0 && (t[0] == '{' || t[0] == '[') && json.Valid(t)
}

func jsonImages(b []byte) ([][]byte, error) {
	var strs []string
	var collect func(v any) error
	collect = func(v any) error {
		switch x := v.(type) {
		case string:
			strs = append(strs, x)
		case []any:
			for _, e := range x {
				if err := collect(e); err != nil {
					return err
				}
			}
		case map[string]any:
			for _, k := range []string{"data", "body", "b64", "instances", "image"} {
				if e, ok := x[k]; ok {
					return collect(e)
				}
			}
			return BadInput(`JSON image input needs "data", "body", "b64" or "instances"`)
		default:
			return BadInput("JSON image input must hold base64 strings, got %s", jsonType(v))
		}
		return nil
	}
	if err := eachJSONItem(b, func(v any, _ bool) error { return collect(v) }); err != nil {
		return nil, err
	}
	out := make([][]byte, len(strs))
	for i, s := range strs {
		d, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return nil, BadInput("JSON image %d is not valid base64: %v", i, err)
		}
		out[i] = d
	}
	return out, nil
}

// Postprocess returns, per image, the top-k classes as an ordered {label: probability}
// object, TorchServe's shape; several images give a JSON array of them.
func (ic *ImageClassifier) Postprocess(s *Sample, out []Tensor) (*Response, error) {
	return topKResponse("image_classifier", s, out, ic.topK, ic.labels)
}

// topKResponse turns float32 logits [N, classes] into, per item, the top k classes after
// softmax as an ordered {label: probability} object (k 0: every class); several items give a
// JSON array of them. It is the postprocessing of every classifier.
func topKResponse(handler string, s *Sample, out []Tensor, k int, labels map[int]string) (*Response, error) {
	if len(out) == 0 || out[0].DType != torch.Float32 || len(out[0].Shape) != 2 {
		return nil, fmt.Errorf("%s: the model must return float32 logits of shape [N, classes]", handler)
	}
	classes := int(out[0].Shape[1])
	if k == 0 {
		k = classes
	}
	logits := out[0].Data
	var body bytes.Buffer
	if s.Items > 1 {
		body.WriteString("[\n")
	}
	row := make([]float64, classes)
	for i := range s.Items {
		for c := range row {
			row[c] = float64(math.Float32frombits(binary.LittleEndian.Uint32(logits[4*(i*classes+c):])))
		}
		if i > 0 {
			body.WriteString(",\n")
		}
		writeTopK(&body, softmax(row), k, labels)
	}
	if s.Items > 1 {
		body.WriteString("\n]")
	}
	body.WriteByte('\n')
	return &Response{ContentType: "application/json", Body: body.Bytes()}, nil
}

// topK returns the indexes of the k largest probabilities, largest first, the lower index
// first among equal ones (a stable sort's order). A few classes of many, as a classifier
// answers, are picked in one pass over them: sorting all 1000 of ImageNet's classes cost
// more than the rest of the postprocessing.
func topK(probs []float64, k int) []int {
	k = min(k, len(probs))
	if k > 32 {
		idx := make([]int, len(probs))
		for i := range idx {
			idx[i] = i
		}
		sort.SliceStable(idx, func(a, c int) bool { return probs[idx[a]] > probs[idx[c]] })
		return idx[:k]
	}
	top := make([]int, 0, k)
	for i, p := range probs {
		if len(top) == k && !(p > probs[top[k-1]]) {
			continue
		}
		// Its place: after every kept probability not below it.
		at := len(top)
		for at > 0 && p > probs[top[at-1]] {
			at--
		}
		if len(top) < k {
			top = append(top, 0)
		}
		copy(top[at+1:], top[at:len(top)-1])
		top[at] = i
	}
	return top
}

// softmax turns x into its probabilities, in place.
func softmax(x []float64) []float64 {
	m := math.Inf(-1)
	for _, v := range x {
		m = math.Max(m, v)
	}
	sum := 0.0
	out := x
	for i, v := range x {
		out[i] = math.Exp(v - m)
		sum += out[i]
	}
	for i := range out {
		out[i] /= sum
	}
	return out
}

// writeTopK writes {"label": p, ...} in descending probability, indented as TorchServe's
// json.dumps(indent=2).
func writeTopK(b *bytes.Buffer, probs []float64, k int, labels map[int]string) {
	idx := topK(probs, k)
	k = len(idx)
	b.WriteString("{\n")
	for n, i := range idx {
		label, ok := labels[i]
		if !ok {
			label = strconv.Itoa(i)
		}
		name, _ := json.Marshal(label)
		b.WriteString("  ")
		b.Write(name)
		b.WriteString(": ")
		b.Write(jsonfloat.AppendFloat64(b.AvailableBuffer(), probs[i]))
		if n < k-1 {
			b.WriteByte(',')
		}
		b.WriteByte('\n')
	}
	b.WriteString("}")
}
