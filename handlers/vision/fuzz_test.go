package vision

import (
	"errors"
	"math"
	"testing"
)

// FuzzApply feeds arbitrary bytes to both JPEG decoders and the Go ones. It
// must never panic or crash in C, every failure must be one of the input
// errors (the transform is valid, so nothing else is excusable), and every
// success must be finite. The seed corpus in testdata/fuzz/FuzzApply holds
// tiny images of each format and flavour, made with PIL.
//
//	go test -run='^$' -fuzz=FuzzApply -fuzztime=5m ./handlers/vision/
func FuzzApply(f *testing.F) {
	f.Add(encodeJPEG(f, 24, 16))
	f.Add(encodePNG(f, 16, 24))
	f.Add(bombPNG(50000, 50000))
	// A small limit keeps the fuzzer from spending its time on huge
	// mutated dimensions.
	tr := Transform{Resize: 32, CropW: 24, CropH: 20, MaxPixels: 1 << 16}
	gray := Transform{Width: 8, Height: 12, Gray: true, MaxPixels: 1 << 16}
	rgb := make([]float32, 3*20*24)
	lum := make([]float32, 8*12)
	f.Fuzz(func(t *testing.T, img []byte) {
		for _, pureGo := range []bool{false, true} {
			tr.PureGoJPEG, gray.PureGoJPEG = pureGo, pureGo
			check(t, tr.Apply(img, rgb), rgb)
			check(t, gray.Apply(img, lum), lum)
		}
	})
}

func check(t *testing.T, err error, out []float32) {
	if err != nil {
		if !errors.Is(err, ErrBadImage) {
			t.Fatalf("error is not ErrBadImage: %v", err)
		}
		return
	}
	for i, v := range out {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			t.Fatalf("output %d is %v", i, v)
		}
	}
}
