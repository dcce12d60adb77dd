package vision

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// venvPython is the project's pinned PyTorch (make venv), the one that exported the zoo.
const venvPython = "../../.venv/bin/python"

// refCase is one entry of the manifest that models/vision_ref.py writes.
type refCase struct {
	Name   string    `json:"name"`
	File   string    `json:"file"`
	Resize int       `json:"resize"`
	Crop   []int     `json:"crop"` // [w, h] or null
	Size   []int     `json:"size"` // [w, h] or null
	Gray   bool      `json:"gray"`
	Mean   []float32 `json:"mean"`
	Std    []float32 `json:"std"`
	Ref    string    `json:"ref"`
	Shape  []int     `json:"shape"`
}

func (c refCase) transform() Transform {
	t := Transform{Resize: c.Resize, Gray: c.Gray, Mean: c.Mean, Std: c.Std}
	if c.Crop != nil {
		t.CropW, t.CropH = c.Crop[0], c.Crop[1]
	}
	if c.Size != nil {
		t.Width, t.Height = c.Size[0], c.Size[1]
	}
	return t
}

var refs struct {
	once  sync.Once
	dir   string
	cases []refCase
	skip  string
	err   error
}

// loadRefs runs models/vision_ref.py once per test binary, into a directory
// TestMain removes, and skips the test where torchvision is not installed.
func loadRefs(t testing.TB) (string, []refCase) {
	t.Helper()
	refs.once.Do(func() {
		if err := exec.Command(venvPython, "-c", "import torchvision").Run(); err != nil {
			refs.skip = fmt.Sprintf("reference tensors need %s with torch and torchvision (make venv): %v", venvPython, err)
			return
		}
		dir, err := os.MkdirTemp("", "vision-ref-")
		if err != nil {
			refs.err = err
			return
		}
		refs.dir = dir
		out, err := exec.Command(venvPython, "../../models/vision_ref.py", "--out", dir).CombinedOutput()
		if err != nil {
			refs.err = fmt.Errorf("models/vision_ref.py: %v\n%s", err, out)
			return
		}
		b, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
		if err == nil {
			err = json.Unmarshal(b, &refs.cases)
		}
		refs.err = err
	})
	if refs.skip != "" {
		t.Skip(refs.skip)
	}
	if refs.err != nil {
		t.Fatal(refs.err)
	}
	return refs.dir, refs.cases
}

func TestMain(m *testing.M) {
	code := m.Run()
	if refs.dir != "" {
		os.RemoveAll(refs.dir)
	}
	os.Exit(code)
}

// diff returns the mean and max absolute difference.
func diff(got, want []float32) (mean, maxd float64) {
	var sum float64
	for i := range got {
		d := math.Abs(float64(got[i]) - float64(want[i]))
		sum += d
		maxd = max(maxd, d)
	}
	return sum / float64(len(got)), maxd
}

// Bounds on the mean absolute difference from torchvision, in normalized
// units: one 8-bit step is 1/255/std, about 0.017 with the ImageNet std. The
// measured values on Debian bookworm (libjpeg-turbo 2.1.5, libwebp 1.2.4,
// Pillow 9.4, torchvision 0.14) are in the comments.
const (
	// PNG, GIF, BMP, WebP (lossy and lossless) and JPEG decoded at full
	// size by libjpeg-turbo (the default), which runs the same IDCT and
	// upsampling as PIL's libjpeg: measured 0, the tensors are identical.
	tolExact = 1e-6
	// JPEG decoded at 1/4 or 1/8 size in the DCT domain before the
	// bilinear resize (JPEGDCTScaling): measured 0.018–0.020 (max 0.67,
	// under 40 levels of 255, at sharp edges). The cost of skipping most of
	// the IDCT work.
	tolDCTScaled = 0.025
	// JPEG decoded by image/jpeg, whose IDCT and nearest-neighbour chroma
	// differ from libjpeg: measured 0.0002 (gray) to 0.028 (320x240 upscaled).
	tolGoJPEG = 0.035
)

// tolerance returns the bound for decoding c with variant; scaled says
// whether the transform picked DCT-domain downscaling for it.
func tolerance(variant string, scaled bool) float64 {
	switch {
	case variant == "gojpeg":
		return tolGoJPEG
	case variant == "turbojpeg-dct" && scaled:
		return tolDCTScaled
	}
	return tolExact
}

func TestMatchesTorchvision(t *testing.T) {
	dir, cases := loadRefs(t)
	for _, c := range cases {
		img, err := os.ReadFile(filepath.Join(dir, c.File))
		if err != nil {
			t.Fatal(err)
		}
		want, shape, err := readNpy(filepath.Join(dir, c.Ref))
		if err != nil {
			t.Fatal(err)
		}
		variants := []string{"default"}
		if strings.HasPrefix(c.Name, "jpeg") {
			// turbojpeg is the default Transform: it must be exact for every size.
			variants = []string{"turbojpeg", "turbojpeg-dct", "gojpeg"}
		}
		for _, v := range variants {
			t.Run(c.Name+"/"+v, func(t *testing.T) {
				tr := c.transform()
				tr.JPEGDCTScaling = v == "turbojpeg-dct"
				tr.PureGoJPEG = v == "gojpeg"
				ch, h, w := tr.OutputShape()
				if fmt.Sprint([]int{ch, h, w}) != fmt.Sprint(shape) {
					t.Fatalf("OutputShape = %d,%d,%d; torchvision made %v", ch, h, w, shape)
				}
				got := make([]float32, ch*h*w)
				if err := tr.Apply(img, got); err != nil {
					t.Fatal(err)
				}
				scale := 1
				if v != "gojpeg" {
					_, w, h, err := DecodeConfig(img)
					if err != nil {
						t.Fatal(err)
					}
					scale = tr.jpegScale(w, h)
				}
				if v == "turbojpeg" && scale != 1 {
					t.Errorf("the default transform decodes at 1/%d: only JPEGDCTScaling may scale", scale)
				}
				mean, maxd := diff(got, want)
				tol := tolerance(v, scale > 1)
				t.Logf("mean |diff| %.6f (bound %g), max %.4f, DCT scale 1/%d", mean, tol, maxd, scale)
				if mean > tol {
					t.Errorf("mean |diff| from torchvision %.6f > %.4f", mean, tol)
				}
				// The exact paths are exact pixel by pixel, not only on average.
				if tol == tolExact && maxd > tolExact {
					t.Errorf("max |diff| from torchvision %.6f > %g", maxd, tolExact)
				}
			})
		}
	}
}

func TestDecodeConfig(t *testing.T) {
	dir, _ := loadRefs(t)
	want := map[string][3]any{
		"photo_1920x1080.jpg": {"jpeg", 1920, 1080},
		"exif6_big.jpg":       {"jpeg", 1080, 1920}, // upright
		"rgb.png":             {"png", 400, 300},
		"palette.gif":         {"gif", 256, 256},
		"rgb.bmp":             {"bmp", 350, 260},
		"lossy.webp":          {"webp", 400, 300},
	}
	for f, w := range want {
		img, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		format, width, height, err := DecodeConfig(img)
		if err != nil || format != w[0] || width != w[1] || height != w[2] {
			t.Errorf("DecodeConfig(%s) = %q, %d, %d, %v; want %v", f, format, width, height, err, w)
		}
	}
}

func TestErrors(t *testing.T) {
	def := DefaultTransform()
	dst := make([]float32, 3*224*224)
	png := encodePNG(t, 64, 48)
	jpg := encodeJPEG(t, 64, 48)
	tests := []struct {
		name string
		img  []byte
		want error
	}{
		{"empty", nil, ErrEmpty},
		{"text", []byte("hello, this is not an image"), ErrUnsupported},
		{"tiff", []byte("II*\x00\x08\x00\x00\x00"), ErrUnsupported},
		{"random", []byte{0x13, 0x37, 0xc0, 0xde, 0x00, 0xff, 0x42}, ErrUnsupported},
		{"truncated png", png[:len(png)/2], ErrCorrupt},
		{"png header only", png[:8], ErrCorrupt},
		{"truncated jpeg", jpg[:len(jpg)/2], ErrCorrupt},
		{"jpeg header only", jpg[:20], ErrCorrupt},
		{"jpeg garbage", append([]byte("\xff\xd8\xff\xe0"), make([]byte, 100)...), ErrCorrupt},
		{"png bomb", bombPNG(50000, 50000), ErrTooLarge},
		{"jpeg bomb", bombJPEG(65000, 65000), ErrTooLarge},
		{"gif bomb", []byte("GIF89a\xff\xff\xff\xff\x00\x00\x00;"), ErrTooLarge},
		{"bmp bomb", bombBMP(100000, 100000), ErrTooLarge},
		{"webp bomb", bombWebP(16384, 16384), ErrTooLarge},
		{"png zero size", bombPNG(0, 10), ErrCorrupt},
	}
	for _, tt := range tests {
		for _, pureGo := range []bool{false, true} {
			tr := def
			tr.PureGoJPEG = pureGo
			err := tr.Apply(tt.img, dst)
			if !errors.Is(err, tt.want) || !errors.Is(err, ErrBadImage) {
				t.Errorf("%s (pure Go %v): got %v, want %v", tt.name, pureGo, err, tt.want)
				continue
			}
			t.Logf("%s: %v", tt.name, err)
		}
	}
}

func TestMaxPixels(t *testing.T) {
	img := encodePNG(t, 64, 48)
	tr := DefaultTransform()
	tr.MaxPixels = 64*48 - 1
	dst := make([]float32, 3*224*224)
	if err := tr.Apply(img, dst); !errors.Is(err, ErrTooLarge) {
		t.Errorf("64x48 with MaxPixels %d: %v, want ErrTooLarge", tr.MaxPixels, err)
	}
	tr.MaxPixels = 64 * 48
	if err := tr.Apply(img, dst); err != nil {
		t.Errorf("64x48 with MaxPixels %d: %v", tr.MaxPixels, err)
	}
}

// TestConfigErrors checks that server-side mistakes are not reported as bad
// images, so that they do not turn into HTTP 400s.
func TestConfigErrors(t *testing.T) {
	img := encodePNG(t, 64, 48)
	for name, f := range map[string]func() error{
		"short dst": func() error { return DefaultTransform().Apply(img, make([]float32, 10)) },
		"no size":   func() error { return Transform{Resize: 256}.Apply(img, nil) },
		"mean for RGB": func() error {
			return Transform{CropW: 8, Gray: true, Mean: []float32{1, 2, 3}}.Apply(img, make([]float32, 64))
		},
	} {
		err := f()
		if err == nil {
			t.Errorf("%s: no error", name)
			continue
		}
		if errors.Is(err, ErrBadImage) {
			t.Errorf("%s: %v is ErrBadImage", name, err)
		}
	}
}

// TestConcurrentApply runs Apply from several goroutines over mixed sizes
// and formats, checking that pooled buffers are never shared; run with -race.
func TestConcurrentApply(t *testing.T) {
	imgs := [][]byte{encodeJPEG(t, 640, 480), encodePNG(t, 300, 200), encodeJPEG(t, 1200, 900), encodePNG(t, 50, 70)}
	tr := DefaultTransform()
	want := make([][]float32, len(imgs))
	for i, img := range imgs {
		want[i] = make([]float32, 3*224*224)
		if err := tr.Apply(img, want[i]); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			got := make([]float32, 3*224*224)
			for n := range 12 {
				i := (g + n) % len(imgs)
				if err := tr.Apply(imgs[i], got); err != nil {
					t.Error(err)
					return
				}
				if m, _ := diff(got, want[i]); m != 0 {
					t.Errorf("image %d differs when run concurrently: mean %g", i, m)
					return
				}
			}
		})
	}
	wg.Wait()
}
