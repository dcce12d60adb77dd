package vision

import (
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
)

// TestOrientedWindowEqualsWholeDecode: a JPEG with an EXIF orientation, whose window alone
// is decoded and turned upright (one pass for orientations 2-4, orientWindow for 5-8), gives
// the tensor of decoding the whole image, turning all of it upright and resizing that, for
// every orientation and windows starting anywhere in an MCU; truncated, it is refused.
func TestOrientedWindowEqualsWholeDecode(t *testing.T) {
	whole := Transform{CropW: 1 << 20} // no resize: the whole image, by TurboJPEG
	transforms := []Transform{DefaultTransform(), {Resize: 100, CropW: 90, CropH: 60}, {Width: 300, Height: 200}}
	for _, size := range [][2]int{{640, 480}, {1001, 333}, {1920, 1080}, {333, 2001}} {
		img := encodeJPEG(t, size[0], size[1])
		for o := uint32(1); o <= 8; o++ {
			exif := exifJPEG(binary.LittleEndian, 3, o)
			rot := append(exif[:len(exif)-2:len(exif)-2], img[2:]...)
			src, err := whole.decodeTurbo(rot)
			if err != nil {
				t.Fatal(err)
			}
			for _, tr := range transforms {
				name := fmt.Sprintf("%v orientation %d %+v", size, o, tr)
				c, h, w := tr.OutputShape()
				got, want := make([]float32, c*h*w), make([]float32, c*h*w)
				if err := tr.Apply(rot, got); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				tr.resampleInto(&src, want)
				if i := firstDiff(got, want); i >= 0 {
					t.Errorf("%s: %v at %d, want %v", name, got[i], i, want[i])
				}
			}
			src.release()
			// Truncated, it is refused as the upright one is, whichever path decodes it.
			tr := DefaultTransform()
			if err := tr.Apply(rot[:len(rot)*2/3], make([]float32, 3*224*224)); !errors.Is(err, ErrCorrupt) {
				t.Errorf("%v orientation %d, truncated: %v, want ErrCorrupt", size, o, err)
			}
		}
	}
}

// BenchmarkPreprocessOriented is BenchmarkPreprocess/turbojpeg/1920x1080 with an EXIF
// orientation: upright (1, the one-pass decode), turned 180° (3) and a phone's portrait (6).
//
//	go test -run='^$' -bench=PreprocessOriented -benchtime=2s ./handlers/vision/
func BenchmarkPreprocessOriented(b *testing.B) {
	img := encodeJPEG(b, 1920, 1080)
	for _, o := range []uint32{1, 3, 6} {
		b.Run(fmt.Sprint(o), func(b *testing.B) {
			exif := exifJPEG(binary.LittleEndian, 3, o)
			rot := append(exif[:len(exif)-2:len(exif)-2], img[2:]...)
			t := DefaultTransform()
			dst := make([]float32, 3*224*224)
			b.ReportAllocs()
			start := cpuTime()
			for b.Loop() {
				if err := t.Apply(rot, dst); err != nil {
					b.Fatal(err)
				}
			}
			reportCPU(b, start)
		})
	}
}
