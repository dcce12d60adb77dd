package vision

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestResizeJPEGCMYKEqualsRaster: a CMYK JPEG (PIL's, Adobe-inverted, as PIL writes them),
// decoded and resized in one pass with each row turned into RGB before its horizontal pass,
// writes the tensor of decoding it into a raster, converting that and resizing it, for sizes
// whose windows start and end anywhere in an MCU.
func TestResizeJPEGCMYKEqualsRaster(t *testing.T) {
	if err := exec.Command(venvPython, "-c", "import PIL").Run(); err != nil {
		t.Skipf("CMYK JPEGs are made by PIL, in %s (make venv): %v", venvPython, err)
	}
	dir := t.TempDir()
	sizes := [][2]int{{640, 480}, {1001, 333}, {1920, 1080}, {333, 901}}
	for _, size := range sizes {
		png := filepath.Join(dir, fmt.Sprintf("%dx%d.png", size[0], size[1]))
		if err := os.WriteFile(png, encodePNG(t, size[0], size[1]), 0o644); err != nil {
			t.Fatal(err)
		}
		script := fmt.Sprintf("from PIL import Image; Image.open(%q).convert('CMYK').save(%q, quality=90)", png, png+".jpg")
		if out, err := exec.Command(venvPython, "-c", script).CombinedOutput(); err != nil {
			t.Fatalf("PIL: %v\n%s", err, out)
		}
	}
	transforms := []Transform{DefaultTransform(), {Resize: 100, CropW: 90, CropH: 60}, {Width: 300, Height: 200}}
	for _, size := range sizes {
		img, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("%dx%d.png.jpg", size[0], size[1])))
		if err != nil {
			t.Fatal(err)
		}
		if hdr, err := turboHeader(img); err != nil || hdr.colorspace != 3 && hdr.colorspace != 4 {
			t.Fatalf("%v: PIL's JPEG has colour space %v (%v), want CMYK or YCCK", size, hdr.colorspace, err)
		}
		for _, tr := range transforms {
			name := fmt.Sprintf("%v %+v", size, tr)
			assertOnePassEqualsRaster(t, name, tr, img)
		}
	}
}
