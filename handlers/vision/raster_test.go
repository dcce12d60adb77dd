package vision

import (
	"bytes"
	"testing"
)

// grid is a test image as rows of pixel values, one byte per pixel.
type grid [][]byte

func flipH(g grid) grid {
	out := grid{}
	for _, row := range g {
		r := make([]byte, len(row))
		for x := range row {
			r[x] = row[len(row)-1-x]
		}
		out = append(out, r)
	}
	return out
}

func flipV(g grid) grid {
	out := grid{}
	for y := range g {
		out = append(out, g[len(g)-1-y])
	}
	return out
}

func transpose(g grid) grid {
	out := make(grid, len(g[0]))
	for x := range out {
		for y := range g {
			out[x] = append(out[x], g[y][x])
		}
	}
	return out
}

// TestOrient checks each EXIF orientation against its definition as flips
// and transposes, independently of the index arithmetic in orient.
func TestOrient(t *testing.T) {
	src := grid{{1, 2, 3}, {4, 5, 6}}
	want := map[int]grid{
		1: src,
		2: flipH(src),
		3: flipV(flipH(src)),
		4: flipV(src),
		5: transpose(src),
		6: flipH(transpose(src)), // 90° clockwise
		7: flipV(flipH(transpose(src))),
		8: flipV(transpose(src)), // 90° counter-clockwise
	}
	for o := 1; o <= 8; o++ {
		for _, c := range []int{1, 3} {
			r := newRaster(3, 2, c)
			r.fullW, r.fullH = 6, 4 // as if decoded at half size
			for y, row := range src {
				for x, v := range row {
					for i := range c {
						r.pix[(y*3+x)*c+i] = v*10 + byte(i)
					}
				}
			}
			r = r.orient(o)
			w := want[o]
			if r.w != len(w[0]) || r.h != len(w) {
				t.Fatalf("orientation %d: %dx%d, want %dx%d", o, r.w, r.h, len(w[0]), len(w))
			}
			if fw, fh := r.fullW, r.fullH; (o >= 5) != (fw == 4 && fh == 6) {
				t.Errorf("orientation %d: full size %dx%d", o, fw, fh)
			}
			var got, exp []byte
			for y := range w {
				for x := range w[y] {
					for i := range c {
						got = append(got, r.pix[(y*r.w+x)*c+i])
						exp = append(exp, w[y][x]*10+byte(i))
					}
				}
			}
			if !bytes.Equal(got, exp) {
				t.Errorf("orientation %d, %d channels: got %v, want %v", o, c, got, exp)
			}
			r.release()
		}
	}
}

func TestToGray(t *testing.T) {
	r := newRaster(3, 1, 3)
	copy(r.pix, []byte{255, 0, 0, 0, 255, 0, 10, 20, 30})
	r.toGray()
	// PIL: Image.new("RGB", (1, 1), c).convert("L").getpixel((0, 0)).
	if want := []byte{76, 150, 18}; r.c != 1 || !bytes.Equal(r.pix, want) {
		t.Errorf("toGray = %v (c=%d), want %v", r.pix, r.c, want)
	}
	r.release()
}
