package libtorch_test

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"encoding/binary"
	"fmt"
	"image"
	"image/color"
	"image/gif"
	"image/jpeg"
	"image/png"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/torchd/torchd/internal/npy"
	"golang.org/x/image/bmp"
)

// Hostile payloads: decompression bombs in each image format, and the bodies that carry them.

func pngOf(t testing.TB, w, h int) []byte {
	var b bytes.Buffer
	if err := png.Encode(&b, image.NewGray(image.Rect(0, 0, w, h))); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// bombPNG is a valid PNG signature and IHDR declaring w×h, then a tiny IDAT: the header of
// a decompression bomb, which must be refused before a pixel is decoded.
func bombPNG(w, h uint32) []byte {
	chunk := func(typ string, data []byte) []byte {
		b := binary.BigEndian.AppendUint32(nil, uint32(len(data)))
		b = append(b, typ...)
		b = append(b, data...)
		return binary.BigEndian.AppendUint32(b, crc32IEEE(append([]byte(typ), data...)))
	}
	ihdr := binary.BigEndian.AppendUint32(nil, w)
	ihdr = binary.BigEndian.AppendUint32(ihdr, h)
	ihdr = append(ihdr, 8, 2, 0, 0, 0) // 8-bit RGB
	b := []byte("\x89PNG\r\n\x1a\n")
	b = append(b, chunk("IHDR", ihdr)...)
	b = append(b, chunk("IDAT", []byte{0x78, 0x9c, 0x63, 0, 0, 0, 1, 0, 1})...)
	return append(b, chunk("IEND", nil)...)
}

func crc32IEEE(b []byte) uint32 {
	crc := ^uint32(0)
	for _, c := range b {
		crc ^= uint32(c)
		for range 8 {
			crc = crc>>1 ^ 0xedb88320&-(crc&1)
		}
	}
	return ^crc
}

// bombJPEG is a small real JPEG whose frame header (SOF0) is rewritten to declare w×h.
func bombJPEG(t testing.TB, w, h uint16) []byte {
	var b bytes.Buffer
	img := image.NewRGBA(image.Rect(0, 0, 16, 16))
	if err := jpeg.Encode(&b, img, nil); err != nil {
		t.Fatal(err)
	}
	j := b.Bytes()
	i := bytes.Index(j, []byte{0xff, 0xc0})
	if i < 0 {
		t.Fatal("no SOF0 in Go's JPEG")
	}
	binary.BigEndian.PutUint16(j[i+5:], h)
	binary.BigEndian.PutUint16(j[i+7:], w)
	return j
}

// bombGIF is a 1×1 GIF whose logical screen is rewritten to w×h.
func bombGIF(t testing.TB, w, h uint16) []byte {
	var b bytes.Buffer
	img := image.NewPaletted(image.Rect(0, 0, 1, 1), color.Palette{color.Black, color.White})
	if err := gif.Encode(&b, img, nil); err != nil {
		t.Fatal(err)
	}
	g := b.Bytes()
	binary.LittleEndian.PutUint16(g[6:], w)
	binary.LittleEndian.PutUint16(g[8:], h)
	return g
}

// bombBMP is a 1×1 BMP whose info header is rewritten to w×h.
func bombBMP(t testing.TB, w, h int32) []byte {
	var b bytes.Buffer
	if err := bmp.Encode(&b, image.NewRGBA(image.Rect(0, 0, 1, 1))); err != nil {
		t.Fatal(err)
	}
	m := b.Bytes()
	binary.LittleEndian.PutUint32(m[18:], uint32(w))
	binary.LittleEndian.PutUint32(m[22:], uint32(h))
	return m
}

func multipartBody(boundary string, parts ...[]byte) []byte {
	var b bytes.Buffer
	for i, p := range parts {
		fmt.Fprintf(&b, "--%s\r\nContent-Disposition: form-data; name=\"data\"; filename=\"%d.png\"\r\nContent-Type: image/png\r\n\r\n", boundary, i)
		b.Write(p)
		b.WriteString("\r\n")
	}
	fmt.Fprintf(&b, "--%s--\r\n", boundary)
	return b.Bytes()
}

func gzipped(t testing.TB, b []byte) []byte {
	var out bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&out, gzip.BestCompression)
	zw.Write(b)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

func npyWithHeader(shape string, data []byte) []byte {
	h := "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }"
	h += strings.Repeat(" ", (64-(10+len(h)+1)%64)%64) + "\n"
	b := append([]byte("\x93NUMPY\x01\x00"), byte(len(h)), byte(len(h)>>8))
	return append(append(b, h...), data...)
}

func repeatJSON(v string, n int) string {
	return "[" + strings.TrimSuffix(strings.Repeat(v+",", n), ",") + "]"
}

// A plain body with Content-Encoding is inflated as the Open Inference Protocol's are:
// gzip and deflate up to max_request_size, and nothing else.
func compressedBodies(t *testing.T, s *server) {
	imgs := heldOut(t)
	url := "/predictions/digits"
	plain := s.post(url, "image/png", imgs[0])
	if plain.status != 200 {
		t.Fatalf("the plain request: %d %s", plain.status, plain.body)
	}
	var deflated bytes.Buffer
	zw := zlib.NewWriter(&deflated)
	zw.Write(imgs[0])
	zw.Close()
	for enc, body := range map[string][]byte{"gzip": gzipped(t, imgs[0]), "deflate": deflated.Bytes(), "identity": imgs[0]} {
		if r := s.post(url, "image/png", body, "Content-Encoding", enc); r.status != 200 || topKey(r) != topKey(plain) {
			t.Errorf("a %s PNG: %d %s, want the plain request's answer %s", enc, r.status, r.body, plain.body)
		}
	}
	bomb := gzipped(t, append(slices.Clone(imgs[0]), make([]byte, 200<<20)...))
	r := timed(t, fmt.Sprintf("gzip bomb (%d bytes → 200 MiB)", len(bomb)), func() response {
		return s.post(url, "image/png", bomb, "Content-Encoding", "gzip")
	})
	wantTS(t, "gzip bomb", r, 413, "decompresses to more than max_request_size")
	wantTS(t, "gzip that is not gzip", s.post(url, "image/png", imgs[0], "Content-Encoding", "gzip"), 400, "gzip")
	wantTS(t, "an encoding torchd does not decode", s.post(url, "image/png", imgs[0], "Content-Encoding", "br"), 400, `unsupported Content-Encoding "br"`)
}

// NaN and infinities are numbers to the model: they go in as sent (an attention mask
// holds -Inf on purpose), and outputs that hold them come back as .npy, which JSON
// numbers cannot carry.
func nanAndInf(t *testing.T, s *server) {
	for name, v := range map[string]float32{"NaN": float32(math.NaN()), "+Inf": float32(math.Inf(1)), "-Inf": float32(math.Inf(-1))} {
		data := make([]byte, 784*4)
		for i := 0; i < len(data); i += 4 {
			binary.LittleEndian.PutUint32(data[i:], math.Float32bits(v))
		}
		r := s.post("/predictions/digits_tensor", "application/x-npy", npyWithHeader("(1, 1, 28, 28)", data))
		if r.status != 200 {
			t.Errorf("%s input: %d %s", name, r.status, r.body)
			continue
		}
		a, err := npy.Decode(r.body)
		if err != nil {
			t.Errorf("%s input: the answer is not .npy (%v): %.200s", name, err, r.body)
			continue
		}
		if out := f32s(a.Data); len(out) != 10 || !slices.ContainsFunc(out, func(f float32) bool { return math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) }) {
			t.Errorf("%s input: outputs %v, want 10 with a NaN or an infinity among them", name, out)
		}
	}
}
