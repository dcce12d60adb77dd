package vision

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestResizedSize(t *testing.T) {
	def := DefaultTransform()
	tests := []struct {
		t            Transform
		w, h         int
		wantW, wantH int
	}{
		{def, 640, 480, 341, 256},   // int(256*640/480) = int(341.33)
		{def, 1920, 1080, 455, 256}, // int(455.11)
		{def, 300, 500, 256, 426},   // int(426.67): truncated, not rounded
		{def, 100, 80, 320, 256},
		{def, 256, 256, 256, 256},
		{Transform{Width: 28, Height: 28}, 640, 480, 28, 28},
		{Transform{CropW: 224}, 640, 480, 640, 480},
	}
	for _, tt := range tests {
		if w, h := tt.t.resizedSize(tt.w, tt.h); w != tt.wantW || h != tt.wantH {
			t.Errorf("resizedSize(%d, %d) = %d, %d; want %d, %d", tt.w, tt.h, w, h, tt.wantW, tt.wantH)
		}
	}
}

func TestCropOrigin(t *testing.T) {
	tests := []struct{ size, crop, want int }{
		{256, 224, 16},
		{455, 224, 116}, // round(115.5) = 116: half to even
		{341, 224, 58},  // round(58.5) = 58: half to even
		{426, 224, 101},
		{224, 224, 0},
		{100, 224, -62}, // padded by (224-100)//2 on the left
		{101, 224, -61},
	}
	for _, tt := range tests {
		if got := cropOrigin(tt.size, tt.crop); got != tt.want {
			t.Errorf("cropOrigin(%d, %d) = %d, want %d", tt.size, tt.crop, got, tt.want)
		}
	}
}

// TestJPEGScale: with JPEGDCTScaling, the largest reduction that keeps the resize target;
// without it (the default), none.
func TestJPEGScale(t *testing.T) {
	def := DefaultTransform()
	def.JPEGDCTScaling = true
	tests := []struct {
		t    Transform
		w, h int
		want int
	}{
		{def, 640, 480, 1},   // 1/2 would be 240 < 256
		{def, 1024, 768, 2},  // 384x512... 512x384 >= 341x256
		{def, 1920, 1080, 4}, // 480x270 >= 455x256
		{def, 1080, 1920, 4}, // portrait, as after EXIF rotation
		{def, 2600, 2100, 8}, // 325x262 >= 321x256
		{def, 2048, 2047, 4}, // 1/8 would be 255.9 rows
		{Transform{CropW: 224, JPEGDCTScaling: true}, 4000, 3000, 1}, // no resize: nothing to gain
		{Transform{Width: 28, Height: 28, JPEGDCTScaling: true}, 640, 480, 8},
		{Transform{Width: 28, Height: 28, JPEGDCTScaling: true}, 200, 480, 4},
		{DefaultTransform(), 1920, 1080, 1}, // the default decodes whole, as PIL
		{DefaultTransform(), 2600, 2100, 1},
		{Transform{Width: 28, Height: 28}, 640, 480, 1},
	}
	for _, tt := range tests {
		if got := tt.t.jpegScale(tt.w, tt.h); got != tt.want {
			t.Errorf("jpegScale(%d, %d) = 1/%d, want 1/%d", tt.w, tt.h, got, tt.want)
		}
	}
}

// TestIdentity checks that a 28x28 gray image resized to 28x28, as for a
// digit classifier, is passed through untouched and only normalized.
func TestIdentity(t *testing.T) {
	m := image.NewGray(image.Rect(0, 0, 28, 28))
	for i := range m.Pix {
		m.Pix[i] = byte(i * 13)
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, m); err != nil {
		t.Fatal(err)
	}
	tr := Transform{Width: 28, Height: 28, Gray: true, Mean: []float32{0.1307}, Std: []float32{0.3081}}
	dst := make([]float32, 28*28)
	if err := tr.Apply(buf.Bytes(), dst); err != nil {
		t.Fatal(err)
	}
	for i, v := range m.Pix {
		if want := (float32(v)/255 - 0.1307) / 0.3081; dst[i] != want {
			t.Fatalf("pixel %d: got %v, want %v", i, dst[i], want)
		}
	}
}

func TestOutputShapeAndValidate(t *testing.T) {
	tests := []struct {
		t       Transform
		c, h, w int
		valid   bool
	}{
		{DefaultTransform(), 3, 224, 224, true},
		{Transform{Resize: 256, CropW: 200}, 3, 200, 200, true}, // square shorthand
		{Transform{Resize: 256, CropW: 200, CropH: 100}, 3, 100, 200, true},
		{Transform{Width: 28, Height: 28, Gray: true}, 1, 28, 28, true},
		{Transform{Width: 64, Height: 32, CropW: 16}, 3, 16, 16, true},
		{Transform{}, 3, 0, 0, false},            // no fixed size
		{Transform{Resize: 256}, 3, 0, 0, false}, // no fixed size
		{Transform{Width: 28}, 3, 0, 0, false},   // half an exact size
		{Transform{Resize: 256, Width: 28, Height: 28}, 3, 28, 28, false},
		{Transform{CropW: 224, Gray: true, Mean: []float32{0.5, 0.5, 0.5}, Std: []float32{1, 1, 1}}, 1, 224, 224, false},
		{Transform{CropW: 224, Mean: []float32{0, 0, 0}, Std: []float32{1, 0, 1}}, 3, 224, 224, false},
		{Transform{CropW: -1}, 3, 0, 0, false},
	}
	for _, tt := range tests {
		c, h, w := tt.t.OutputShape()
		if c != tt.c || h != tt.h || w != tt.w {
			t.Errorf("%+v: OutputShape = %d, %d, %d; want %d, %d, %d", tt.t, c, h, w, tt.c, tt.h, tt.w)
		}
		if err := tt.t.validate(); (err == nil) != tt.valid {
			t.Errorf("%+v: validate = %v, want valid %v", tt.t, err, tt.valid)
		}
	}
}

// TestJPEGWindowEqualsWholeDecode: decoding only the window the resize reads gives, inside
// it less its margin, the pixels of a whole decode, for sizes whose window starts and ends
// anywhere in an MCU, landscape and portrait (4:2:0, by image/jpeg; TestMatchesTorchvision
// covers PIL's progressive, 4:4:4, gray and CMYK files through the window against
// torchvision).
func TestJPEGWindowEqualsWholeDecode(t *testing.T) {
	whole := Transform{CropW: 1 << 20} // no resize: the whole image, by TurboJPEG
	for _, size := range [][2]int{{640, 480}, {513, 700}, {1001, 333}, {1920, 1080}, {1080, 1920}, {333, 2001}, {2047, 1531}} {
		img := encodeJPEG(t, size[0], size[1])
		def := DefaultTransform()
		x0, x1, y0, y1, ok := def.sourceWindow(size[0], size[1])
		if !ok {
			t.Fatalf("%v: no window", size)
		}
		got, err := def.decodeTurbo(img)
		if err != nil {
			t.Fatal(err)
		}
		want, err := whole.decodeTurbo(img)
		if err != nil {
			t.Fatal(err)
		}
		m := jpegWindowMargin
		differ := 0
		for y := max(y0, y0+m*boolInt(y0 > 0)); y < min(y1, y1-m*boolInt(y1 < size[1])); y++ {
			a := (y*size[0] + x0 + m*boolInt(x0 > 0)) * 3
			b := (y*size[0] + x1 - m*boolInt(x1 < size[0])) * 3
			for i := a; i < b; i++ {
				if got.pix[i] != want.pix[i] {
					differ++
				}
			}
		}
		if differ > 0 {
			t.Errorf("%v: %d bytes of the window [%d,%d)x[%d,%d) differ from the whole decode", size, differ, x0, x1, y0, y1)
		}
		got.release()
		want.release()
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestJPEGWindowErrors: a truncated or damaged photo fails (or not) through the window decode
// as it does through TurboJPEG's whole decode, wherever the damage is, above, inside or below
// the window: truncation is ErrCorrupt, and nothing crashes.
func TestJPEGWindowErrors(t *testing.T) {
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
	for name, b := range cases {
		r, errWin := def.decodeTurbo(b)
		r.release()
		r, errWhole := whole.decodeTurbo(b)
		r.release()
		if (errWin == nil) != (errWhole == nil) || (errWin != nil && !errors.Is(errWin, ErrCorrupt)) {
			t.Errorf("%s: window decode %v, whole decode %v", name, errWin, errWhole)
		}
		if strings.HasPrefix(name, "cut") && (errWin == nil || !strings.Contains(errWin.Error(), "truncated")) {
			t.Errorf("%s: %v, want a truncated JPEG refused", name, errWin)
		}
	}
}

// TestJPEGWindowScanLimit: a progressive JPEG of more than 500 scans, a CPU bomb the pixel
// limit does not catch, is refused by the window decode as TurboJPEG's TJFLAG_LIMITSCANS
// refuses it in the whole decode. The bomb is PIL's progressive photo with its last scan
// repeated 600 times.
func TestJPEGWindowScanLimit(t *testing.T) {
	dir, _ := loadRefs(t)
	img, err := os.ReadFile(filepath.Join(dir, "photo_progressive.jpg"))
	if err != nil {
		t.Fatal(err)
	}
	last := bytes.LastIndex(img, []byte{0xff, 0xda})
	if last < 0 || !bytes.HasSuffix(img, []byte{0xff, 0xd9}) {
		t.Fatal("photo_progressive.jpg has no scan or no EOI")
	}
	scan := img[last : len(img)-2]
	bomb := append([]byte{}, img[:len(img)-2]...)
	for range 600 {
		bomb = append(bomb, scan...)
	}
	bomb = append(bomb, 0xff, 0xd9)
	def := DefaultTransform()
	if _, _, _, _, ok := def.sourceWindow(640, 480); !ok {
		t.Fatal("no window for 640x480")
	}
	for name, tr := range map[string]Transform{"window": def, "whole": {CropW: 1 << 20}} {
		r, err := tr.decodeTurbo(bomb)
		r.release()
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "500 scans") {
			t.Errorf("%s decode of %d scans: %v, want the scan limit", name, 600, err)
		}
	}
	// The photo itself decodes.
	r, err := def.decodeTurbo(img)
	r.release()
	if err != nil {
		t.Fatal(err)
	}
}

// TestStoredRect: for every EXIF orientation, the stored rectangle holds every pixel of the
// upright one, and no more rows or columns than it needs.
func TestStoredRect(t *testing.T) {
	const w, h = 7, 5
	for o := 1; o <= 8; o++ {
		uw, uh := w, h
		if o >= 5 {
			uw, uh = h, w
		}
		for _, r := range [][4]int{{0, uw, 0, uh}, {1, 3, 2, 4}, {uw - 1, uw, 0, 1}} {
			sx0, sx1, sy0, sy1 := storedRect(o, w, h, r[0], r[1], r[2], r[3])
			base, dx, dy := orientMap(o, w, h)
			want := [4]int{w, 0, h, 0}
			for y := r[2]; y < r[3]; y++ {
				for x := r[0]; x < r[1]; x++ {
					i := base + x*dx + y*dy
					want = [4]int{min(want[0], i%w), max(want[1], i%w+1), min(want[2], i/w), max(want[3], i/w+1)}
				}
			}
			if got := [4]int{sx0, sx1, sy0, sy1}; got != want {
				t.Errorf("orientation %d, upright %v: stored %v, want %v", o, r, got, want)
			}
		}
	}
}
