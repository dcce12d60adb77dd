package vision

import (
	"bytes"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// huffOutcome is one decode of a JPEG's whole image and of a window of it (the rows and
// columns around it skipped, as a served request's decode skips them): the pixels, and the
// errors.
type huffOutcome struct {
	whole, window []byte
	fast          bool
	err           string
}

func decodeBothWays(img []byte, fast bool) (huffOutcome, bool) {
	if len(img) == 0 {
		return huffOutcome{}, false
	}
	hdr, err := turboHeader(img)
	if err != nil || hdr.w*hdr.h > 1<<22 {
		return huffOutcome{}, false
	}
	c := 3
	switch hdr.colorspace {
	case 2: // TJCS_GRAY
		c = 1
	case 3, 4: // TJCS_CMYK, TJCS_YCCK
		c = 4
	}
	var o huffOutcome
	var errs []string
	pix, used, err := decodeJPEGHuff(img, hdr.w, hdr.h, c, 0, hdr.w, 0, hdr.h, fast)
	o.whole, o.fast = pix, used
	if err != nil {
		errs = append(errs, err.Error())
	}
	x0, x1, y0, y1 := hdr.w/4, max(hdr.w*3/4, hdr.w/4+1), hdr.h/3, max(hdr.h*2/3, hdr.h/3+1)
	pix, _, err = decodeJPEGHuff(img, hdr.w, hdr.h, c, x0, x1, y0, y1, fast)
	// Only the window's pixels are the decode's: the rows below it may be read or skipped,
	// as libjpeg's reader stands at the skip (rest_is_plain).
	for y := y0; y < y1; y++ {
		o.window = append(o.window, pix[(y*hdr.w+x0)*c:(y*hdr.w+x1)*c]...)
	}
	if err != nil {
		errs = append(errs, err.Error())
	}
	o.err = strings.Join(errs, "; ")
	return o, true
}

// compareHuffman decodes img with libjpeg's Huffman decoder and with jpeghuff.c's and
// fails unless both give the same error, or none and the same pixels.
func compareHuffman(t testing.TB, name string, img []byte) (fastUsed bool) {
	t.Helper()
	want, ok := decodeBothWays(img, false)
	if !ok {
		return false
	}
	got, _ := decodeBothWays(img, true)
	if got.err != want.err {
		t.Fatalf("%s: jpeghuff.c's decode: error %q, libjpeg's: %q", name, got.err, want.err)
	}
	if want.err != "" {
		return got.fast
	}
	for _, p := range []struct {
		what      string
		got, want []byte
	}{{"whole image", got.whole, want.whole}, {"window", got.window, want.window}} {
		if !bytes.Equal(p.got, p.want) {
			i := 0
			for p.got[i] == p.want[i] {
				i++
			}
			t.Fatalf("%s: %s: jpeghuff.c's pixels differ from libjpeg's first at byte %d (%d, not %d)", name, p.what, i, p.got[i], p.want[i])
		}
	}
	return got.fast
}

func huffCorpus(t testing.TB) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	add := func(pattern string) {
		paths, _ := filepath.Glob(pattern)
		for _, p := range paths {
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			files[p] = b
		}
	}
	add("testdata/jpeghuff/*.jpg")
	add("../../models/out/*/*.jpg")
	add("../../.venv/lib/python3*/site-packages/ai_benchmark/data/*/*.jpg")
	files["encodeJPEG 1920x1080"] = encodeJPEG(t, 1920, 1080)
	files["encodeJPEG 31x17"] = encodeJPEG(t, 31, 17)
	return files
}

// TestFastHuffman decodes every JPEG at hand (the layouts of testdata/jpeghuff, the zoo's
// samples, the ai-benchmark photos in the venv) with both Huffman decoders: the pixels
// must be libjpeg's to the byte, and jpeghuff.c's must have decoded every baseline file.
func TestFastHuffman(t *testing.T) {
	files := huffCorpus(t)
	if len(files) < 30 {
		t.Fatalf("only %d JPEGs found", len(files))
	}
	for name, img := range files {
		fast := compareHuffman(t, name, img)
		if want := !strings.Contains(name, "progressive"); fast != want {
			t.Errorf("%s: jpeghuff.c decoded it: %v, want %v", name, fast, want)
		}
	}
}

// TestFastHuffmanDamaged damages the small files of testdata/jpeghuff (cut short, bytes
// changed, markers and 0xFF bytes put into the entropy-coded data, each seeded) and wants
// the same outcome from both decoders: the same error, or the same pixels.
func TestFastHuffmanDamaged(t *testing.T) {
	paths, _ := filepath.Glob("testdata/jpeghuff/*.jpg")
	if len(paths) == 0 {
		t.Fatal("no testdata/jpeghuff")
	}
	rng := rand.New(rand.NewSource(65))
	n := 0
	for _, p := range paths {
		img, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		sos := bytes.Index(img, []byte{0xFF, 0xDA})
		if sos < 0 {
			t.Fatalf("%s has no SOS", p)
		}
		name := filepath.Base(p)
		for i := 0; i < 12; i++ {
			cut := sos + 1 + rng.Intn(len(img)-sos-1)
			compareHuffman(t, name+" cut", img[:cut])
			n++
		}
		for i := 0; i < 40; i++ {
			m := bytes.Clone(img)
			for j := rng.Intn(3); j >= 0; j-- {
				at := sos + 14 + rng.Intn(len(img)-sos-16)
				switch rng.Intn(5) {
				case 0:
					m[at] ^= byte(1 << rng.Intn(8))
				case 1:
					m[at] = byte(rng.Intn(256))
				case 2:
					m[at], m[at+1] = 0xFF, byte(0xD0+rng.Intn(8)) // a restart marker out of place
				case 3:
					m[at] = 0xFF // a 0xFF not stuffed
				case 4:
					m = append(m[:at:at], append(bytes.Repeat([]byte{0xFF}, 1+rng.Intn(3)), m[at:]...)...)
				}
			}
			compareHuffman(t, name+" damaged", m)
			n++
		}
	}
	t.Logf("%d damaged files", n)
}

// FuzzFastHuffman compares the two Huffman decoders on any input.
//
//	go test -run='^$' -fuzz=FuzzFastHuffman -fuzztime=60s ./handlers/vision/
func FuzzFastHuffman(f *testing.F) {
	paths, _ := filepath.Glob("testdata/jpeghuff/*.jpg")
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, img []byte) {
		compareHuffman(t, "input", img)
	})
}
