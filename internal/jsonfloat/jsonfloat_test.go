package jsonfloat

import (
	"encoding/json"
	"math"
	"testing"
)

// A float and its neighbours a few ulps away, across powers of ten, print with one width,
// and read back as the same float.
func TestFixedWidthAndExact(t *testing.T) {
	for _, v := range []float64{1, 0.35092763416068634, 0.1, 0.09999999, 9.999999, 1e-7, 3.3241585e-2, 1e-30, 123456.7} {
		want32 := len(AppendFloat32(nil, float32(v)))
		f := float32(v)
		for i := 0; i < 8; i++ {
			if got := len(AppendFloat32(nil, f)); got != want32 {
				t.Errorf("float32 %v: width %d, %v: %d", v, want32, f, got)
			}
			var back float32
			if err := json.Unmarshal(AppendFloat32(nil, f), &back); err != nil || back != f {
				t.Errorf("float32 %v reads back as %v (%v)", f, back, err)
			}
			f = math.Nextafter32(f, 2*f+1)
		}
		want64 := len(AppendFloat64(nil, v))
		g := v
		for i := 0; i < 8; i++ {
			if got := len(AppendFloat64(nil, g)); got != want64 {
				t.Errorf("float64 %v: width %d, %v: %d", v, want64, g, got)
			}
			var back float64
			if err := json.Unmarshal(AppendFloat64(nil, g), &back); err != nil || back != g {
				t.Errorf("float64 %v reads back as %v (%v)", g, back, err)
			}
			g = math.Nextafter(g, 2*g+1)
		}
	}
	// Across a power of ten, the width stays.
	if a, b := AppendFloat32(nil, 0.099999994), AppendFloat32(nil, 0.1); len(a) != len(b) {
		t.Errorf("%s and %s differ in width", a, b)
	}
}
