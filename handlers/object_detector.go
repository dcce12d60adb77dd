package handlers

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"strconv"

	"github.com/torchd/torchd/handlers/vision"
	"github.com/torchd/torchd/internal/jsonfloat"
	"github.com/torchd/torchd/torch"
)

func init() { Register("object_detector", newObjectDetector) }

// ObjectDetector is TorchServe's object_detector: image bytes → ToTensor, each image at its own
// size → one forward of a torchvision detection model on the batch's images as List[Tensor]
// → per image, the detections scoring at least threshold, [{label: [x1, y1, x2, y2], "score":
// s}, ...] in the model's order.
//
// The model is a scripted torchvision detector (Faster R-CNN, RetinaNet, SSD, FCOS, Mask
// R-CNN, ...): forward(List[Tensor]) returning (losses, detections) as scripting makes it, or
// the detections alone, one Dict[str, Tensor] per image with "boxes" [K, 4], "labels" [K] and
// "scores" [K]. It resizes and normalizes the images itself, so images of different sizes
// share a batch.
//
// Options (model-config.toml [options]): threshold (0.5), color ("rgb"), mean and std (none:
// ToTensor only, as TorchServe), max_pixels (12 M, per image), max_images (64, per request),
// max_request_pixels (48 M, per request).
type ObjectDetector struct {
	transform vision.Transform // its ApplyNative: no resize, no crop
	threshold float64
	limits    imageLimits
	labels    map[int]string
}

// A detector's input is the whole image in float32, 12 bytes a pixel, where a classifier's is
// its 224×224 crop, so its limits are lower than image_classifier's: 12 Mpx an image (a phone's
// photo, 144 MB as a tensor; torchvision's detectors scale every image down to about 1 Mpx
// anyway) and 48 Mpx a request.
const (
	detectorMaxPixels        = 12_000_000
	detectorMaxRequestPixels = 48_000_000
)

func newObjectDetector(ctx Context) (Handler, error) {
	cfg := ctx.Config
	opts := intOptions{cfg: &cfg}
	t := vision.Transform{MaxPixels: opts.get("max_pixels", detectorMaxPixels)}
	limits, err := readImageLimitsOver(&opts, detectorMaxRequestPixels)
	if err != nil {
		return nil, err
	}
	if err := readColor(&cfg, &t); err != nil {
		return nil, err
	}
	threshold, err := cfg.FloatOption("threshold", 0.5)
	if err != nil {
		return nil, err
	}
	if math.IsNaN(threshold) || threshold < 0 || threshold > 1 {
		return nil, fmt.Errorf("%s: option threshold must be a score from 0 to 1, got %v", cfg.File, threshold)
	}
	return &ObjectDetector{transform: t, threshold: threshold, limits: limits, labels: ctx.Labels}, nil
}

// Preprocess decodes every image of the request at its own size: one [C, H, W] tensor each.
func (od *ObjectDetector) Preprocess(r *Request) (*Sample, error) {
	images, err := imagePayloads(r)
	if err != nil {
		return nil, err
	}
	tooLarge := func(i int) error { _, _, _, err := od.transform.ApplyNative(images[i]); return err }
	if err := checkImageLimits(images, od.limits, od.transform.MaxPixels, tooLarge); err != nil {
		return nil, err
	}
	s := &Sample{Items: len(images)}
	for i, img := range images {
		if r.Canceled != nil && r.Canceled() {
			return nil, ErrCanceled
		}
		data, h, w, err := od.transform.ApplyNative(img)
		if err != nil {
			return nil, imageError(i, len(images), err)
		}
		s.Tensors = append(s.Tensors, Tensor{DType: torch.Float32, Shape: []int64{int64(len(data) / (h * w)), int64(h), int64(w)}, Data: float32Bytes(data)})
	}
	return s, nil
}

// PreprocessTensor takes images already made tensors, as TorchServe's vision handlers take a
// list: float32 [C, H, W] for one image or [N, C, H, W] for several of one size.
func (od *ObjectDetector) PreprocessTensor(t Tensor) (*Sample, error) {
	if len(t.Shape) == 3 {
		t.Shape = append([]int64{1}, t.Shape...)
	}
	if t.DType != torch.Float32 || len(t.Shape) != 4 || t.Shape[0] < 1 || t.Shape[1] < 1 || t.Shape[2] < 1 || t.Shape[3] < 1 {
		return nil, BadInput("a tensor input must be float32 images [C, H, W] or [N, C, H, W], got %v %v", t.DType, t.Shape)
	}
	if int64(len(t.Data)) != 4*t.Numel() {
		return nil, BadInput("tensor input: %d bytes for shape %v", len(t.Data), t.Shape)
	}
	n := int(t.Shape[0])
	per := len(t.Data) / n
	s := &Sample{Items: n}
	for i := range n {
		s.Tensors = append(s.Tensors, Tensor{DType: torch.Float32, Shape: t.Shape[1:], Data: t.Data[i*per : (i+1)*per]})
	}
	return s, nil
}

// WarmupSample is a black 320×320 image, the size torchvision's smaller detectors resize to.
func (od *ObjectDetector) WarmupSample() *Sample {
	return &Sample{Items: 1, Tensors: []Tensor{{DType: torch.Float32, Shape: []int64{3, 320, 320}, Data: make([]byte, 4*3*320*320)}}}
}

// Infer runs every image of the batch in one forward, as List[Tensor], and returns per
// sample three tensors per image: boxes, labels and scores.
func (od *ObjectDetector) Infer(m torch.Model, batch []*Sample) ([][]Tensor, error) {
	var images []*torch.Tensor
	for _, s := range batch {
		n := len(images)
		for _, t := range s.Tensors {
			x, err := imageTensors(t)
			if err != nil {
				return nil, err
			}
			images = append(images, x...)
		}
		if len(images)-n != s.Items {
			return nil, fmt.Errorf("object_detector: a sample of %d images has %d", s.Items, len(images)-n)
		}
	}
	out, err := m.Forward(images)
	if err != nil {
		return nil, err
	}
	defer torch.CloseValue(out)
	dets, err := detections(out)
	if err != nil {
		return nil, err
	}
	if len(dets) != len(images) {
		return nil, fmt.Errorf("object_detector: the model returned detections for %d images, given %d", len(dets), len(images))
	}
	res := make([][]Tensor, len(batch))
	i := 0
	for b, s := range batch {
		for range s.Items {
			ts, err := detectionTensors(dets[i])
			if err != nil {
				return nil, fmt.Errorf("object_detector: image %d: %v", i, err)
			}
			res[b] = append(res[b], ts...)
			i++
		}
	}
	return res, nil
}

// imageTensors wraps a sample's tensor as images: float32 [C, H, W] is one, [N, C, H, W] N.
func imageTensors(t Tensor) ([]*torch.Tensor, error) {
	if t.DType != torch.Float32 || len(t.Shape) < 3 || len(t.Shape) > 4 || int64(len(t.Data)) != 4*t.Numel() {
		return nil, BadInput("object_detector takes float32 images [C, H, W] or [N, C, H, W], got %v %v", t.DType, t.Shape)
	}
	if len(t.Shape) == 3 {
		x, err := torch.FromBytes(t.DType, t.Data, t.Shape...)
		return []*torch.Tensor{x}, err
	}
	n := int(t.Shape[0])
	if n == 0 {
		return nil, nil
	}
	per := len(t.Data) / n
	out := make([]*torch.Tensor, n)
	for i := range out {
		x, err := torch.FromBytes(t.DType, t.Data[i*per:(i+1)*per], t.Shape[1:]...)
		if err != nil {
			return nil, err
		}
		out[i] = x
	}
	return out, nil
}

// detections finds the per-image list of detection dicts in a detector's output: scripted
// torchvision detectors return (losses, detections), a wrapper may return the list alone.
func detections(v any) ([]any, error) {
	switch x := v.(type) {
	case []any:
		return x, nil
	case torch.Tuple:
		if len(x) == 2 {
			if l, ok := x[1].([]any); ok {
				return l, nil
			}
		}
	}
	return nil, fmt.Errorf("object_detector: the model returned %s; a detector returns a list of Dict[str, Tensor] (boxes, labels, scores), one per image, or (losses, that list) as scripted torchvision detectors do", torch.TypeName(v))
}

// detectionTensors copies one image's boxes (float32 [K, 4]), labels (int64 [K]) and scores
// (float32 [K]) into Go memory.
func detectionTensors(v any) ([]Tensor, error) {
	d, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("the detections are %s, not a Dict[str, Tensor]", torch.TypeName(v))
	}
	var out []Tensor
	var k int64 = -1
	for _, key := range []string{"boxes", "labels", "scores"} {
		x, ok := d[key].(*torch.Tensor)
		if !ok {
			return nil, fmt.Errorf("the detections have no tensor %q", key)
		}
		c, err := x.ToCPU()
		if err != nil {
			return nil, err
		}
		if c != x {
			defer c.Close()
		}
		c, err = asDType(c, key)
		if err != nil {
			return nil, err
		}
		shape := c.Shape()
		if len(shape) == 0 || k >= 0 && shape[0] != k || key == "boxes" && (len(shape) != 2 || shape[1] != 4) || key != "boxes" && len(shape) != 1 {
			return nil, fmt.Errorf("%q has shape %v; want boxes [K, 4], labels [K] and scores [K]", key, shape)
		}
		k = shape[0]
		out = append(out, Tensor{DType: c.DType(), Shape: append([]int64(nil), shape...), Data: bytes.Clone(c.Bytes())})
	}
	return out, nil
}

// asDType checks a detection tensor's element type: float32 boxes and scores, int64 labels.
func asDType(t *torch.Tensor, key string) (*torch.Tensor, error) {
	want := torch.Float32
	if key == "labels" {
		want = torch.Int64
	}
	if t.DType() != want {
		return nil, fmt.Errorf("%q is %v, want %v", key, t.DType(), want)
	}
	return t, nil
}

// Postprocess writes, per image, the detections scoring at least the threshold as TorchServe's
// object_detector does: [{label: [x1, y1, x2, y2], "score": s}, ...] in the model's order,
// indented as its json.dumps(indent=2); several images give a JSON array of those lists.
func (od *ObjectDetector) Postprocess(s *Sample, out []Tensor) (*Response, error) {
	if len(out) != 3*s.Items {
		return nil, fmt.Errorf("object_detector: %d output tensors for %d images", len(out), s.Items)
	}
	var b bytes.Buffer
	indent := ""
	if s.Items > 1 {
		b.WriteString("[\n")
		indent = "  "
	}
	for i := range s.Items {
		if i > 0 {
			b.WriteString(",\n")
		}
		b.WriteString(indent)
		if err := od.writeImage(&b, indent, out[3*i], out[3*i+1], out[3*i+2]); err != nil {
			return nil, err
		}
	}
	if s.Items > 1 {
		b.WriteString("\n]")
	}
	b.WriteByte('\n')
	return &Response{ContentType: "application/json", Body: b.Bytes()}, nil
}

// writeImage writes one image's list; a detection kept with a box that is not finite is the
// model's error (JSON has no NaN).
func (od *ObjectDetector) writeImage(b *bytes.Buffer, indent string, boxes, labels, scores Tensor) error {
	n := int(scores.Shape[0])
	first := true
	b.WriteByte('[')
	for k := range n {
		score := math.Float32frombits(binary.LittleEndian.Uint32(scores.Data[4*k:]))
		if !(float64(score) >= od.threshold) { // NaN too
			continue
		}
		if math.IsInf(float64(score), 0) {
			return fmt.Errorf("object_detector: the model returned a score of %v", score)
		}
		if !first {
			b.WriteByte(',')
		}
		first = false
		class := int(int64(binary.LittleEndian.Uint64(labels.Data[8*k:])))
		label, ok := od.labels[class]
		if !ok {
			label = strconv.Itoa(class)
		}
		name, _ := json.Marshal(label)
		fmt.Fprintf(b, "\n%s  {\n%s    %s: [", indent, indent, name)
		for j := range 4 {
			if j > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(b, "\n%s      ", indent)
			v := math.Float32frombits(binary.LittleEndian.Uint32(boxes.Data[4*(4*k+j):]))
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return fmt.Errorf("object_detector: the model returned a box of %v with score %v", v, score)
			}
			b.Write(jsonfloat.AppendFloat32(b.AvailableBuffer(), v))
		}
		fmt.Fprintf(b, "\n%s    ],\n%s    \"score\": ", indent, indent)
		b.Write(jsonfloat.AppendFloat32(b.AvailableBuffer(), score))
		fmt.Fprintf(b, "\n%s  }", indent)
	}
	if !first {
		b.WriteString("\n" + indent)
	}
	b.WriteByte(']')
	return nil
}
