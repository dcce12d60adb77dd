package handlers

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/torchd/torchd/handlers/vision"
	"github.com/torchd/torchd/internal/jsonfloat"
	"github.com/torchd/torchd/torch"
)

func init() { Register("image_segmenter", newImageSegmenter) }

// ImageSegmenter is TorchServe's image_segmenter: image bytes → Resize, CenterCrop, Normalize
// (image_classifier's preprocessing) → forward → softmax over the classes → per pixel
// [class, probability] of the most probable class, an [H][W][2] array per image.
//
// The model returns float32 [N, classes, H, W] scores: the "out" of a Dict[str, Tensor] (as
// torchvision's segmentation models do, beside "aux"), a tensor, or a tuple's first tensor.
//
// Options (model-config.toml [options]): image_classifier's resize (256), crop_size (224),
// width and height, mean and std, color, max_pixels, max_images and max_request_pixels.
type ImageSegmenter struct {
	transform vision.Transform
	limits    imageLimits
}

func newImageSegmenter(ctx Context) (Handler, error) {
	cfg := ctx.Config
	opts := intOptions{cfg: &cfg}
	t, err := readImageTransform(&opts)
	if err != nil {
		return nil, err
	}
	limits, err := readImageLimits(&opts)
	if err != nil {
		return nil, err
	}
	return &ImageSegmenter{transform: t, limits: limits}, nil
}

// Preprocess decodes every image of the request into one [N, C, H, W] tensor.
func (is *ImageSegmenter) Preprocess(r *Request) (*Sample, error) {
	return imageSample(r, is.transform, is.limits)
}

// PreprocessTensor takes images already transformed: float32 [C, H, W] or [N, C, H, W].
func (is *ImageSegmenter) PreprocessTensor(t Tensor) (*Sample, error) {
	return transformedImages(t, is.transform)
}

// WarmupSample is a black image of the model's input shape.
func (is *ImageSegmenter) WarmupSample() *Sample { return blankImage(is.transform) }

func (is *ImageSegmenter) explainForward(err error) error { return explainChannels(err) }

// SelectOutputs takes the class scores from the model's output: a dict's "out", a tensor, or
// a tuple's or list's first item.
func (is *ImageSegmenter) SelectOutputs(v any) ([]*torch.Tensor, error) {
	switch x := v.(type) {
	case *torch.Tensor:
		return []*torch.Tensor{x}, nil
	case map[string]any:
		if t, ok := x["out"].(*torch.Tensor); ok {
			return []*torch.Tensor{t}, nil
		}
	case torch.Tuple:
		if len(x) > 0 {
			if t, ok := x[0].(*torch.Tensor); ok {
				return []*torch.Tensor{t}, nil
			}
		}
	case []any:
		if len(x) > 0 {
			if t, ok := x[0].(*torch.Tensor); ok {
				return []*torch.Tensor{t}, nil
			}
		}
	}
	return nil, fmt.Errorf("image_segmenter: the model returned %s; a segmenter returns its class scores [N, classes, H, W] as a tensor, a tuple's first item or a dict's \"out\"", torch.TypeName(v))
}

// Postprocess writes, per image, TorchServe's answer: for every pixel, row by row, the most
// probable class (a float, as TorchServe's stacked tensor has it) and its softmax probability,
// [[[class, p], ...], ...]. It is written without TorchServe's indentation (json.dumps with
// indent=2 puts each number on a line of its own, for 100,000 numbers an image). Several
// images give a JSON array of those arrays.
func (is *ImageSegmenter) Postprocess(s *Sample, out []Tensor) (*Response, error) {
	if len(out) == 0 || out[0].DType != torch.Float32 || len(out[0].Shape) != 4 || out[0].Shape[1] < 1 {
		var shape []int64
		if len(out) > 0 {
			shape = out[0].Shape
		}
		return nil, fmt.Errorf("image_segmenter: the model must return float32 class scores [N, classes, H, W], got %v", shape)
	}
	classes, h, w := int(out[0].Shape[1]), int(out[0].Shape[2]), int(out[0].Shape[3])
	plane := h * w
	data := out[0].Data
	var b bytes.Buffer
	b.Grow(s.Items * plane * 22)
	if s.Items > 1 {
		b.WriteByte('[')
	}
	scores := make([]float32, classes)
	for i := range s.Items {
		if i > 0 {
			b.WriteByte(',')
		}
		img := data[4*i*classes*plane : 4*(i+1)*classes*plane]
		b.WriteByte('[')
		for y := range h {
			if y > 0 {
				b.WriteByte(',')
			}
			b.WriteByte('[')
			for x := range w {
				for c := range classes {
					scores[c] = math.Float32frombits(binary.LittleEndian.Uint32(img[4*(c*plane+y*w+x):]))
				}
				class, p := topClass(scores)
				if x > 0 {
					b.WriteByte(',')
				}
				b.WriteByte('[')
				b.Write(strconv.AppendFloat(b.AvailableBuffer(), float64(class), 'f', 1, 32))
				b.WriteByte(',')
				b.Write(jsonfloat.AppendFloat32(b.AvailableBuffer(), p))
				b.WriteByte(']')
			}
			b.WriteByte(']')
		}
		b.WriteByte(']')
	}
	if s.Items > 1 {
		b.WriteByte(']')
	}
	b.WriteByte('\n')
	return &Response{ContentType: "application/json", Body: b.Bytes()}, nil
}

// topClass returns the first class of the highest score and its softmax probability, as
// torch.max(softmax(scores)) gives them. A NaN score makes every probability NaN in torch;
// here it answers probability 0, since JSON has no NaN.
func topClass(scores []float32) (int, float32) {
	best := 0
	for c, v := range scores {
		if v > scores[best] {
			best = c
		}
	}
	m := float64(slices.Max(scores))
	var sum float64
	for _, v := range scores {
		sum += math.Exp(float64(v) - m)
	}
	p := float32(math.Exp(float64(scores[best])-m) / sum)
	if math.IsNaN(float64(p)) || math.IsInf(float64(p), 0) {
		p = 0
	}
	return best, p
}
