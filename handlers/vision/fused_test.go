package vision

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"image"
	"image/jpeg"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestHorizontalISAsAgree: each build of the horizontal pass this CPU runs (any CPU,
// SSE4.1, AVX2) gives the same bytes as the others, for downscales and upscales, odd
// sizes, crops larger than the image, and windows reaching the row's last pixels, where
// the vector builds fall back to the scalar sums.
func TestHorizontalISAsAgree(t *testing.T) {
	defer func(old int) { resampleISA = old }(resampleISA)
	rng := rand.New(rand.NewPCG(1, 2))
	transforms := []Transform{
		DefaultTransform(),
		{Resize: 64, CropW: 64, CropH: 64},
		{Resize: 300, CropW: 300, CropH: 300},
		{Width: 97, Height: 31},
		{Width: 1000, Height: 7},
		{Resize: 20, CropW: 40, CropH: 40},
	}
	for _, size := range [][2]int{{640, 480}, {1920, 1080}, {33, 517}, {5, 5}, {1, 9}, {2001, 3}} {
		for _, c := range []int{1, 3} {
			r := newRaster(size[0], size[1], c)
			for i := range r.pix {
				r.pix[i] = byte(rng.IntN(256))
			}
			for _, tr := range transforms {
				if c == 1 {
					tr.Gray = true
				}
				oc, oh, ow := tr.OutputShape()
				var want []float32
				for isa := range 3 {
					if visISA(isa) != isa {
						continue
					}
					resampleISA = isa
					got := make([]float32, oc*oh*ow)
					tr.resampleInto(&r, got)
					if want == nil {
						want = got
						continue
					}
					if i := firstDiff(got, want); i >= 0 {
						t.Errorf("%v c=%d %+v: isa %d gives %v at %d, isa 0 %v", size, c, tr, isa, got[i], i, want[i])
					}
				}
			}
			r.release()
		}
	}
}

func firstDiff(a, b []float32) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

// TestResizeJPEGEqualsRaster: the one-pass decode and resize of an upright JPEG
// (resizeJPEG) writes the tensor that decoding into a raster and resizing it writes, for
// RGB and gray JPEGs of sizes whose windows start and end anywhere in an MCU, with each
// build of the horizontal pass.
func TestResizeJPEGEqualsRaster(t *testing.T) {
	defer func(old int) { resampleISA = old }(resampleISA)
	transforms := []Transform{DefaultTransform(), {Resize: 100, CropW: 90, CropH: 60}, {Width: 300, Height: 200}, {Resize: 700, CropW: 800, CropH: 800}}
	for _, size := range [][2]int{{640, 480}, {513, 700}, {1001, 333}, {1920, 1080}, {1080, 1920}, {333, 2001}, {2047, 1531}} {
		for _, gray := range []bool{false, true} {
			var img []byte
			if gray {
				var buf bytes.Buffer
				g := image.NewGray(image.Rect(0, 0, size[0], size[1]))
				rgb := pattern(size[0], size[1])
				for i := range g.Pix {
					g.Pix[i] = rgb.Pix[4*i+1]
				}
				if err := jpeg.Encode(&buf, g, &jpeg.Options{Quality: 90}); err != nil {
					t.Fatal(err)
				}
				img = buf.Bytes()
			} else {
				img = encodeJPEG(t, size[0], size[1])
			}
			for _, tr := range transforms {
				if gray {
					tr.Gray = true
				}
				for isa := range 3 {
					if visISA(isa) != isa {
						continue
					}
					resampleISA = isa
					name := fmt.Sprintf("%v gray=%v %+v isa %d", size, gray, tr, isa)
					assertOnePassEqualsRaster(t, name, tr, img)
				}
			}
		}
	}
}

// TestResizeJPEGDeclines: resizeJPEG leaves to the raster path what it does not handle (an
// EXIF-rotated photo, DCT scaling, no resize, RGB made gray), writing nothing.
func TestResizeJPEGDeclines(t *testing.T) {
	img := encodeJPEG(t, 640, 480)
	exif := exifJPEG(binary.LittleEndian, 3, 6)
	rotated := append(exif[:len(exif)-2:len(exif)-2], img[2:]...) // its APP1, then img's segments
	dct := DefaultTransform()
	dct.JPEGDCTScaling = true
	gray := DefaultTransform()
	gray.Gray = true
	for name, c := range map[string]struct {
		tr  Transform
		img []byte
	}{
		"rotated":   {DefaultTransform(), rotated},
		"dct":       {dct, encodeJPEG(t, 1920, 1080)},
		"no resize": {Transform{CropW: 1 << 20}, img},
		"gray":      {gray, img},
		"pure go":   {Transform{Resize: 256, CropW: 224, CropH: 224, PureGoJPEG: true}, img},
		"bad":       {DefaultTransform(), img[:10]},
	} {
		oc, oh, ow := c.tr.OutputShape()
		if oh*ow > 1<<22 {
			oc, oh, ow = 1, 1, 1
		}
		dst := make([]float32, oc*oh*ow)
		if done, err := c.tr.resizeJPEG(c.img, dst); done || err != nil {
			t.Errorf("%s: resizeJPEG = %v, %v, want false, nil", name, done, err)
		}
		if i := firstDiff(dst, make([]float32, len(dst))); i >= 0 {
			t.Errorf("%s: dst written at %d", name, i)
		}
	}
}

// TestResizeJPEGErrors: a truncated or damaged photo fails (or not) in the one-pass decode
// as it does decoded whole by TurboJPEG, wherever the damage is, above, inside or below the
// window: truncation is ErrCorrupt, and nothing crashes.
func TestResizeJPEGErrors(t *testing.T) {
	img := encodeJPEG(t, 1920, 1080)
	def := DefaultTransform()
	whole := Transform{CropW: 1 << 20}
	cases := map[string][]byte{}
	for _, cut := range []int{len(img) / 20, len(img) / 2, len(img) * 19 / 20, len(img) - 2} {
		cases[fmt.Sprintf("cut at %d of %d", cut, len(img))] = img[:cut]
	}
	for _, at := range []int{len(img) / 10, len(img) / 2, len(img) * 19 / 20} {
		b := append([]byte{}, img...)
		for i := at; i < at+64; i++ {
			b[i] = byte(i * 31)
		}
		cases[fmt.Sprintf("garbage at %d", at)] = b
	}
	oc, oh, ow := def.OutputShape()
	for name, b := range cases {
		done, err := def.resizeJPEG(b, make([]float32, oc*oh*ow))
		r, errWhole := whole.decodeTurbo(b)
		r.release()
		if !done || (err == nil) != (errWhole == nil) || (err != nil && !errors.Is(err, ErrCorrupt)) {
			t.Errorf("%s: one pass %v, %v; whole decode %v", name, done, err, errWhole)
		}
		if strings.HasPrefix(name, "cut") && (err == nil || !strings.Contains(err.Error(), "truncated")) {
			t.Errorf("%s: %v, want a truncated JPEG refused", name, err)
		}
	}
}

// assertOnePassEqualsRaster fails unless tr's one-pass decode and resize of img gives the
// pixels of decoding img whole and resizing the raster.
func assertOnePassEqualsRaster(t *testing.T, name string, tr Transform, img []byte) {
	t.Helper()
	oc, oh, ow := tr.OutputShape()
	got := make([]float32, oc*oh*ow)
	done, err := tr.resizeJPEG(img, got)
	if err != nil || !done {
		t.Fatalf("%s: resizeJPEG = %v, %v", name, done, err)
	}
	src, err := tr.decodeTurbo(img)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]float32, len(got))
	tr.resampleInto(&src, want)
	src.release()
	if i := firstDiff(got, want); i >= 0 {
		t.Errorf("%s: %v at %d, want %v", name, got[i], i, want[i])
	}
}

// TestResizeJPEGRestBelowWindow: the rows below the window are skipped unread where the
// rest of the data is plain entropy-coded data up to the EOI, and read otherwise; either
// way the one-pass decode gives the raster path's pixels, and fails (or not) as a decode
// that reads every row does: with bytes after the EOI, and with a marker (a frame, a scan,
// a restart, a comment, an EOI) put into the data of the rows below the window, of a photo
// with and one without restart markers.
func TestResizeJPEGRestBelowWindow(t *testing.T) {
	dir, _ := loadRefs(t)
	restart, err := os.ReadFile(filepath.Join(dir, "photo_restart.jpg"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(restart, []byte{0xff, 0xdd}) {
		t.Fatal("photo_restart.jpg has no restart interval")
	}
	def := DefaultTransform()
	oc, oh, ow := def.OutputShape()
	for photo, img := range map[string][]byte{"plain": encodeJPEG(t, 1920, 1080), "restart": restart} {
		assertOnePassEqualsRaster(t, photo, def, img)
		assertOnePassEqualsRaster(t, photo+" with bytes after the EOI", def, append(append([]byte{}, img...), 0, 0, 0xff, 0xd9, 1))
		for _, marker := range []byte{0xc0, 0xda, 0xd0, 0xd7, 0xfe, 0xd9} {
			for _, at := range []int{len(img) * 97 / 100, len(img) - 40} {
				b := append(append(append([]byte{}, img[:at]...), 0xff, marker, 0, 4, 1, 2), img[at:]...)
				name := fmt.Sprintf("%s, marker %#x at %d of %d", photo, marker, at, len(img))
				done, err := def.resizeJPEG(b, make([]float32, oc*oh*ow))
				all := newRaster(1920, 1080, 3)
				errAll := decodeJPEGWindow(b, &all, 0, 1920, 0, 1080)
				all.release()
				if !done || (err == nil) != (errAll == nil) || (err != nil && !errors.Is(err, ErrCorrupt)) {
					t.Errorf("%s: one pass %v, %v; every row read %v", name, done, err, errAll)
				}
				if err == nil {
					assertOnePassEqualsRaster(t, name, def, b)
				}
			}
		}
	}
}
