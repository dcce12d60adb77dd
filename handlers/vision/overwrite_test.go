package vision

import (
	"encoding/binary"
	"fmt"
	"math"
	"testing"
)

// TestApplyWritesEveryElement: Apply writes every element of dst, the padding of an image
// smaller than its crop included, whatever the path (one pass, raster, EXIF turn, gray, PNG),
// so a tensor reused from another request (the image handlers pool them) comes out as a
// fresh one would.
func TestApplyWritesEveryElement(t *testing.T) {
	jpg := encodeJPEG(t, 640, 480)
	exif := exifJPEG(binary.LittleEndian, 3, 6)
	images := map[string][]byte{
		"jpeg":         jpg,
		"small jpeg":   encodeJPEG(t, 90, 70),
		"rotated jpeg": append(exif[:len(exif)-2:len(exif)-2], jpg[2:]...),
		"png":          encodePNG(t, 300, 200),
		"small png":    encodePNG(t, 50, 70),
	}
	dct := DefaultTransform()
	dct.JPEGDCTScaling = true
	transforms := []Transform{
		DefaultTransform(), dct,
		{Resize: 100, CropW: 200, CropH: 150},
		{Width: 97, Height: 31, Gray: true},
		{Resize: 64, CropW: 64, CropH: 64, Gray: true, Mean: []float32{0.5}, Std: []float32{0.25}},
	}
	for name, img := range images {
		for _, tr := range transforms {
			c, h, w := tr.OutputShape()
			fresh := make([]float32, c*h*w)
			if err := tr.Apply(img, fresh); err != nil {
				t.Fatalf("%s %+v: %v", name, tr, err)
			}
			reused := make([]float32, c*h*w)
			for i := range reused {
				reused[i] = float32(math.NaN())
			}
			if err := tr.Apply(img, reused); err != nil {
				t.Fatal(err)
			}
			if i := firstDiff(reused, fresh); i >= 0 {
				t.Errorf("%s %s: element %d is %v written over NaNs, %v written over zeros", name, fmt.Sprintf("%+v", tr), i, reused[i], fresh[i])
			}
		}
	}
}
