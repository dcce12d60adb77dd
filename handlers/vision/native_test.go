package vision

import (
	"bytes"
	"errors"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"testing"
)

// ApplyNative keeps the image's size: ToTensor's v/255 per channel, then Normalize where a
// mean and std are given; a gray image fills every channel; a JPEG is decoded at full size,
// however large (a transform's resize would decode it at 1/8).
func TestApplyNative(t *testing.T) {
	m := image.NewNRGBA(image.Rect(0, 0, 3, 2))
	for i := range 6 {
		m.Set(i%3, i/3, color.NRGBA{uint8(40 * i), uint8(255 - 40*i), 7, 255})
	}
	var b bytes.Buffer
	png.Encode(&b, m)
	got, h, w, err := Transform{Resize: 256, CropW: 224}.ApplyNative(b.Bytes())
	if err != nil || h != 2 || w != 3 || len(got) != 18 {
		t.Fatalf("got %d values %dx%d, %v", len(got), h, w, err)
	}
	for i := range 6 {
		want := [3]float32{float32(40*i) / 255, float32(255-40*i) / 255, float32(7) / 255}
		for c := range 3 {
			if got[c*6+i] != want[c] {
				t.Errorf("pixel %d channel %d: %v, want %v", i, c, got[c*6+i], want[c])
			}
		}
	}
	norm, _, _, err := Transform{Mean: []float32{0.5, 0.5, 0.5}, Std: []float32{0.25, 0.25, 0.25}}.ApplyNative(b.Bytes())
	if err != nil || norm[0] != (0-0.5)/0.25 || norm[6] != (1-0.5)/0.25 {
		t.Errorf("normalized: %v %v", norm[:7], err)
	}

	g := image.NewGray(image.Rect(0, 0, 2, 2))
	g.Pix = []uint8{0, 51, 102, 255}
	b.Reset()
	png.Encode(&b, g)
	rgb, _, _, err := Transform{}.ApplyNative(b.Bytes())
	if err != nil || len(rgb) != 12 || rgb[1] != 0.2 || rgb[5] != 0.2 || rgb[9] != 0.2 {
		t.Errorf("gray as RGB: %v %v", rgb, err)
	}
	one, _, _, err := Transform{Gray: true}.ApplyNative(b.Bytes())
	if err != nil || len(one) != 4 {
		t.Errorf("gray: %v %v", one, err)
	}

	big := image.NewRGBA(image.Rect(0, 0, 640, 480))
	b.Reset()
	jpeg.Encode(&b, big, nil)
	if _, h, w, err := (Transform{Resize: 32, CropW: 32}).ApplyNative(b.Bytes()); err != nil || h != 480 || w != 640 {
		t.Errorf("JPEG: %dx%d, %v", w, h, err)
	}
}

// Its refusals are Apply's: a bad image wraps ErrBadImage, over MaxPixels before decoding;
// a mean without a std, or a zero std, is the transform's error.
func TestApplyNativeRefusals(t *testing.T) {
	if _, _, _, err := (Transform{}).ApplyNative([]byte("nope")); !errors.Is(err, ErrUnsupported) {
		t.Errorf("not an image: %v", err)
	}
	m := image.NewGray(image.Rect(0, 0, 100, 100))
	var b bytes.Buffer
	png.Encode(&b, m)
	if _, _, _, err := (Transform{MaxPixels: 9999}).ApplyNative(b.Bytes()); !errors.Is(err, ErrTooLarge) {
		t.Errorf("over MaxPixels: %v", err)
	}
	for _, tr := range []Transform{{Mean: []float32{0, 0, 0}}, {Mean: []float32{0}, Std: []float32{1}}, {Mean: []float32{0, 0, 0}, Std: []float32{1, 0, 1}}} {
		if _, _, _, err := tr.ApplyNative(b.Bytes()); err == nil || errors.Is(err, ErrBadImage) {
			t.Errorf("%+v: %v", tr, err)
		}
	}
}
