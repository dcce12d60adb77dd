package vision

import (
	"fmt"
	"testing"
)

// BenchmarkPreprocess times Apply with TorchServe's default transform on
// JPEGs (quality 90) made in memory, with each decoder; turbojpeg-full is
// libjpeg-turbo without DCT-domain downscaling, to show what that saves.
//
//	go test -run='^$' -bench=Preprocess -benchtime=2s -count=3 ./handlers/vision/
func BenchmarkPreprocess(b *testing.B) {
	for _, dec := range []string{"turbojpeg", "turbojpeg-full", "gojpeg"} {
		for _, size := range [][2]int{{640, 480}, {1920, 1080}} {
			b.Run(fmt.Sprintf("%s/%dx%d", dec, size[0], size[1]), func(b *testing.B) {
				img := encodeJPEG(b, size[0], size[1])
				t := DefaultTransform()
				t.PureGoJPEG = dec == "gojpeg"
				t.fullJPEGDecode = dec == "turbojpeg-full"
				c, h, w := t.OutputShape()
				dst := make([]float32, c*h*w)
				b.ReportAllocs()
				b.SetBytes(int64(len(img)))
				for b.Loop() {
					if err := t.Apply(img, dst); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkResample times the resize, crop and normalization alone, on a
// decoded 640x480 image.
func BenchmarkResample(b *testing.B) {
	r := newRaster(640, 480, 3)
	defer r.release()
	for i := range r.pix {
		r.pix[i] = byte(i * 7)
	}
	t := DefaultTransform()
	dst := make([]float32, 3*224*224)
	b.ReportAllocs()
	for b.Loop() {
		t.resampleInto(&r, dst)
	}
}
