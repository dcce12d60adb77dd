package vision

import "testing"

func BenchmarkResample(b *testing.B) {
	r := newRaster(640, 480, 3)
	for i := range r.pix {
		r.pix[i] = byte(i * 7)
	}
	t := DefaultTransform()
	dst := make([]float32, 3*224*224)
	for b.Loop() {
		t.resampleInto(r, dst)
	}
}
