// Package vision turns an encoded image (JPEG, PNG, GIF, BMP, WebP) into a
// normalized float32 CHW tensor buffer, matching the torchvision transforms of
// TorchServe's image_classifier handler: Resize(256), CenterCrop(224),
// ToTensor(), Normalize(ImageNet mean, std). Unlike TorchServe it honours the
// EXIF orientation of JPEGs.
//
// It follows PIL step for step: the resize is PIL's Image.resize(BILINEAR)
// (which torchvision 0.14 calls) coefficient for coefficient, JPEG is decoded
// by libjpeg-turbo like PIL's libjpeg, and lossy WebP colour is converted as
// libwebp does. The tensor therefore equals torchvision's, unless the caller
// opts into decoding a large JPEG at 1/2, 1/4 or 1/8 size in the DCT domain to
// skip most of the work (a mean difference of about 0.02 in normalized units).
//
// It knows nothing of HTTP or LibTorch: it fills a []float32 the caller owns,
// and refuses images over a pixel limit before decoding them.
package vision

import (
	"errors"
	"fmt"
)

// ErrBadImage is wrapped by every error about the image itself, as opposed
// to the Transform or dst: the client's fault, HTTP 400. The errors below
// say which fault; Apply and DecodeConfig wrap them with detail.
var ErrBadImage = errors.New("vision: bad image")

var (
	ErrEmpty       = fmt.Errorf("%w: empty", ErrBadImage)
	ErrUnsupported = fmt.Errorf("%w: unsupported format", ErrBadImage)
	ErrTooLarge    = fmt.Errorf("%w: too large", ErrBadImage)
	ErrCorrupt     = fmt.Errorf("%w: corrupt or truncated", ErrBadImage)
)

// DefaultMaxPixels is the decompression-bomb limit used when
// Transform.MaxPixels is zero: 40 megapixels, 120 MB of decoded RGB.
const DefaultMaxPixels = 40_000_000

// Transform describes the preprocessing from image bytes to a tensor. The
// output shape must be fixed, so at least one of crop or exact size is set.
// The zero value is not usable; start from DefaultTransform.
type Transform struct {
	// Resize scales the shorter side to this many pixels keeping the aspect
	// ratio, like torchvision's Resize(int). 0 means no resize.
	Resize int
	// CropW, CropH center-crop the resized image, like CenterCrop((h, w)),
	// padding with black where the image is smaller. If only one is set, the
	// crop is square. 0 for both means no crop.
	CropW, CropH int
	// Width, Height resize to exactly this size, like Resize((h, w)); use
	// instead of Resize. Both or neither must be set.
	Width, Height int
	// Mean and Std normalize each output channel: (x/255 - mean) / std. Nil
	// means mean 0 and std 1 (plain ToTensor); otherwise one value per channel.
	Mean, Std []float32
	// Gray outputs one luma channel (PIL's convert("L")) instead of RGB.
	Gray bool
	// MaxPixels rejects images with more pixels than this before decoding
	// them. 0 means DefaultMaxPixels.
	MaxPixels int
	// PureGoJPEG decodes JPEG with image/jpeg instead of libjpeg-turbo. It is
	// slower and further from PIL; it exists for benchmarks and comparison.
	PureGoJPEG bool
	// JPEGDCTScaling lets a JPEG at least twice the resize target in both
	// directions be decoded at 1/2, 1/4 or 1/8 size in the DCT domain, which
	// skips most of the decoding work for a different tensor (docs/benchmarks.md,
	// Image preprocessing). Off, every JPEG is decoded at full size, as PIL
	// does, so the tensor equals torchvision's and TorchServe's.
	JPEGDCTScaling bool
}

// DefaultTransform returns TorchServe's image_classifier preprocessing:
// Resize(256), CenterCrop(224), ImageNet mean and std, RGB.
func DefaultTransform() Transform {
	return Transform{
		Resize: 256,
		CropW:  224,
		CropH:  224,
		Mean:   []float32{0.485, 0.456, 0.406},
		Std:    []float32{0.229, 0.224, 0.225},
	}
}

// OutputShape returns the shape of the tensor Apply writes: channels, height
// and width. Height and width are 0 if t has neither a crop nor an exact size.
func (t Transform) OutputShape() (c, h, w int) {
	c = 3
	if t.Gray {
		c = 1
	}
	cw, ch := t.crop()
	switch {
	case cw > 0:
		return c, ch, cw
	case t.Width > 0 && t.Height > 0:
		return c, t.Height, t.Width
	}
	return c, 0, 0
}

// crop returns the crop size, filling in the square shorthand.
func (t Transform) crop() (w, h int) {
	w, h = t.CropW, t.CropH
	if w == 0 {
		w = h
	}
	if h == 0 {
		h = w
	}
	return w, h
}

func (t Transform) maxPixels() int {
	if t.MaxPixels > 0 {
		return t.MaxPixels
	}
	return DefaultMaxPixels
}

// validate reports configuration mistakes. They are the server's, not the
// client's, so the errors do not wrap ErrBadImage.
func (t Transform) validate() error {
	c, h, w := t.OutputShape()
	switch {
	case t.Resize < 0 || t.CropW < 0 || t.CropH < 0 || t.Width < 0 || t.Height < 0:
		return fmt.Errorf("vision: negative size in transform %+v", t)
	case (t.Width > 0) != (t.Height > 0):
		return fmt.Errorf("vision: exact size needs both Width and Height, got %dx%d", t.Width, t.Height)
	case t.Resize > 0 && t.Width > 0:
		return errors.New("vision: set either Resize or Width/Height, not both")
	case h == 0 || w == 0:
		return errors.New("vision: output size is not fixed; set a crop or Width/Height")
	case t.Mean != nil && len(t.Mean) != c, t.Std != nil && len(t.Std) != c:
		return fmt.Errorf("vision: Mean and Std need %d values each, got %d and %d", c, len(t.Mean), len(t.Std))
	}
	for _, s := range t.Std {
		if s == 0 {
			return errors.New("vision: Std has a zero")
		}
	}
	return nil
}

// onePassJPEG lets Apply decode and resize a JPEG in one pass where it can (resizeJPEG); the
// benchmarks turn it off to compare with decoding into a raster.
var onePassJPEG = true

// Apply decodes img and writes the transformed tensor into dst, channel-major
// (CHW), which must have length c*h*w from OutputShape. Errors about the image
// wrap ErrBadImage and one of ErrEmpty, ErrUnsupported, ErrTooLarge or
// ErrCorrupt. Apply is safe for concurrent use.
func (t Transform) Apply(img []byte, dst []float32) error {
	if err := t.validate(); err != nil {
		return err
	}
	c, h, w := t.OutputShape()
	if len(dst) != c*h*w {
		return fmt.Errorf("vision: dst has length %d, want %d (%dx%dx%d)", len(dst), c*h*w, c, h, w)
	}
	// The header first, to hold the image's pixels in the process's DecodeBudget until
	// its tensor is written.
	format, w, h, err := DecodeConfig(img)
	if err != nil {
		return err
	}
	if err := t.checkPixels(format, w, h); err != nil {
		return err
	}
	release := decoding.acquire(int64(w) * int64(h))
	defer release()
	if format == "jpeg" && onePassJPEG {
		if done, err := t.resizeJPEG(img, dst); done {
			return err
		}
	}
	src, err := t.decode(img)
	if err != nil {
		return err
	}
	defer src.release()
	if t.Gray && src.c == 3 {
		src.toGray()
	}
	t.resampleInto(&src, dst)
	return nil
}
