package jsonfloat

import (
	"encoding/json"
	"math"
	"testing"
)

// A float and its neighbours a few ulps away print with one width, and read back as the
// same float.
func TestFixedWidthAndExact(t *testing.T) {
	for _, v := range []float64{1, 0.35092763416068634, 0.1, 0.09999999, 9.999999, 1e-7, 3.3241585e-2, 1e-30, 123456.7} {
		checkNeighbours(t, float32(v), AppendFloat32, func(f float32) float32 { return math.Nextafter32(f, 2*f+1) })
		checkNeighbours(t, v, AppendFloat64, func(f float64) float64 { return math.Nextafter(f, 2*f+1) })
	}
	// Across a power of ten, the width stays.
	if a, b := AppendFloat32(nil, 0.099999994), AppendFloat32(nil, 0.1); len(a) != len(b) {
		t.Errorf("%s and %s differ in width", a, b)
	}
	if a, b := AppendFloat32(nil, -1.5), AppendFloat32(nil, 1.5); len(a) != len(b)+1 {
		t.Errorf("%s and %s: a sign takes one byte", a, b)
	}
	// The shortest digits, padded: a float32 0.2 reads as 0.2 into a float64.
	for _, c := range []struct {
		got, want string
	}{
		{string(AppendFloat32(nil, 0.2)), "2.00000000e-01"},
		{string(AppendFloat32(nil, 0)), "0.00000000e+00"},
		{string(AppendFloat32(nil, -400)), "-4.00000000e+02"},
		{string(AppendFloat32(nil, 0.033241570)), "3.32415700e-02"},
		{string(AppendFloat64(nil, 0.9525741268224334)), "9.5257412682243340e-01"},
		{string(AppendFloat64(nil, 1)), "1.0000000000000000e+00"},
		{string(AppendFloat64(nil, 5e-324)), "5.0000000000000000e-324"},
	} {
		if c.got != c.want {
			t.Errorf("got %s, want %s", c.got, c.want)
		}
	}
}

func checkNeighbours[F float32 | float64](t *testing.T, v F, appendF func([]byte, F) []byte, next func(F) F) {
	t.Helper()
	want := len(appendF(nil, v))
	f := v
	for range 8 {
		b := appendF(nil, f)
		if len(b) != want {
			t.Errorf("%v: width %d, %v (%s): %d", v, want, f, b, len(b))
		}
		var back F
		if err := json.Unmarshal(b, &back); err != nil || back != f {
			t.Errorf("%s reads back as %v (%v), want %v", b, back, err, f)
		}
		f = next(f)
	}
}
