package vision

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"image"
	"image/jpeg"
	"image/png"
	"testing"
)

// pattern is a deterministic w×h picture (gradients, a disc, stripes and
// pseudo-random noise), so that tests and benchmarks need no files.
func pattern(w, h int) *image.RGBA {
	m := image.NewRGBA(image.Rect(0, 0, w, h))
	seed := uint32(2463534242)
	for y := range h {
		for x := range w {
			seed ^= seed << 13
			seed ^= seed >> 17
			seed ^= seed << 5
			noise := int(seed%16) - 8
			r := 255 * x / w
			g := 255 * y / h
			b := 128
			if dx, dy := x-w/3, y-h/2; dx*dx+dy*dy < h*h/9 {
				r, g, b = 220, 40, 40
			}
			if x%6 < 3 && y < h/8 {
				r, g, b = 250, 250, 250
			}
			p := m.Pix[m.PixOffset(x, y):]
			p[0] = clipByte(r + noise)
			p[1] = clipByte(g + noise)
			p[2] = clipByte(b + noise)
			p[3] = 255
		}
	}
	return m
}

func encodeJPEG(tb testing.TB, w, h int) []byte {
	tb.Helper()
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, pattern(w, h), &jpeg.Options{Quality: 90}); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

func encodePNG(tb testing.TB, w, h int) []byte {
	tb.Helper()
	var buf bytes.Buffer
	if err := png.Encode(&buf, pattern(w, h)); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

// bombPNG is a PNG signature and IHDR for a w×h RGB image, and no pixels:
// a decompression bomb's opening.
func bombPNG(w, h uint32) []byte {
	ihdr := make([]byte, 17)
	copy(ihdr, "IHDR")
	binary.BigEndian.PutUint32(ihdr[4:], w)
	binary.BigEndian.PutUint32(ihdr[8:], h)
	ihdr[12], ihdr[13] = 8, 2 // 8-bit truecolour
	b := []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\x0d")
	b = append(b, ihdr...)
	return binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(ihdr))
}

// bombJPEG is a small valid JPEG whose frame header claims w×h.
func bombJPEG(w, h uint16) []byte {
	var buf bytes.Buffer
	jpeg.Encode(&buf, pattern(16, 16), nil)
	b := buf.Bytes()
	for i := 2; i+9 < len(b); i++ {
		if b[i] == 0xff && b[i+1] == 0xc0 { // SOF0: length, precision, height, width
			binary.BigEndian.PutUint16(b[i+5:], h)
			binary.BigEndian.PutUint16(b[i+7:], w)
			break
		}
	}
	return b
}

// bombBMP is a 24-bit BMP header claiming w×h, and no pixels.
func bombBMP(w, h uint32) []byte {
	b := make([]byte, 54)
	copy(b, "BM")
	binary.LittleEndian.PutUint32(b[10:], 54) // pixel data offset
	binary.LittleEndian.PutUint32(b[14:], 40) // BITMAPINFOHEADER
	binary.LittleEndian.PutUint32(b[18:], w)
	binary.LittleEndian.PutUint32(b[22:], h)
	binary.LittleEndian.PutUint16(b[26:], 1)  // planes
	binary.LittleEndian.PutUint16(b[28:], 24) // bits per pixel
	return b
}

// bombWebP is a lossless WebP header claiming w×h (at most 16384 each).
func bombWebP(w, h uint32) []byte {
	vp8l := []byte{0x2f, 0, 0, 0, 0}
	binary.LittleEndian.PutUint32(vp8l[1:], (w-1)|(h-1)<<14)
	b := []byte("RIFF\x00\x00\x00\x00WEBPVP8L")
	b = binary.LittleEndian.AppendUint32(b, uint32(len(vp8l)))
	b = append(b, vp8l...)
	binary.LittleEndian.PutUint32(b[4:], uint32(len(b)-8))
	return b
}
