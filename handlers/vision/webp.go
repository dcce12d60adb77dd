package vision

import "image"

// x/image/webp returns a lossy WebP as 4:2:0 YCbCr planes, which are exact
// (VP8 decoding is integer arithmetic), but image.YCbCr's conversion assumes
// JPEG's full-range YCbCr and repeats chroma samples. libwebp, which PIL uses,
// treats VP8 as BT.601 limited range and interpolates chroma ("fancy
// upsampling"); with its conversion the images differ by a mean of 0.13 in
// normalized units, with this one they are identical.

// webpToRGB converts lossy WebP planes to an RGB raster as libwebp's
// EmitFancyRGB and UpsampleRgbLinePair do. Alpha, if any, is dropped.
func webpToRGB(m *image.YCbCr) raster {
	w, h := m.Rect.Dx(), m.Rect.Dy()
	r := newRaster(w, h, 3)
	crows := (h + 1) / 2
	for y := range h {
		// libwebp pairs output rows (2k-1, 2k) between chroma rows k-1 and
		// k; the first row, and the last of an even height, see one
		// chroma row twice.
		var top, cur int
		bottom := false
		switch {
		case y == 0:
			top, cur = 0, 0
		case y%2 == 1:
			top, cur = y/2, min(y/2+1, crows-1)
		default:
			top, cur, bottom = y/2-1, y/2, true
		}
		upsampleRow(r.pix[y*w*3:(y+1)*w*3], m.Y[y*m.YStride:y*m.YStride+w],
			m.Cb[top*m.CStride:], m.Cr[top*m.CStride:], m.Cb[cur*m.CStride:], m.Cr[cur*m.CStride:], bottom)
	}
	return r
}

// upsampleRow converts one row. Chroma for each pixel is (9a + 3b + 3c + d)/16
// of its four nearest samples, nearer row first, in libwebp's rounding: tu/tv
// are the chroma row above the pixel row, cu/cv the one below, and bottom says
// the pixel row is nearer the one below.
func upsampleRow(dst, ys, tu, tv, cu, cv []byte, bottom bool) {
	n := len(ys)
	pairs := (n - 1) / 2
	edge := func(t, c byte) int { // a column with one chroma sample per row
		if bottom {
			t, c = c, t
		}
		return (3*int(t) + int(c) + 2) >> 2
	}
	yuvToRGB(dst[0:3], ys[0], edge(tu[0], cu[0]), edge(tv[0], cv[0]))
	for x := 1; x <= pairs; x++ {
		u0, u1 := fancy(tu[x-1], tu[x], cu[x-1], cu[x], bottom)
		v0, v1 := fancy(tv[x-1], tv[x], cv[x-1], cv[x], bottom)
		yuvToRGB(dst[(2*x-1)*3:(2*x)*3], ys[2*x-1], u0, v0)
		yuvToRGB(dst[2*x*3:(2*x+1)*3], ys[2*x], u1, v1)
	}
	if n%2 == 0 {
		yuvToRGB(dst[(n-1)*3:n*3], ys[n-1], edge(tu[pairs], cu[pairs]), edge(tv[pairs], cv[pairs]))
	}
}

// fancy interpolates one chroma channel for the two pixels between samples
// [a b] (row above) and [c d] (row below).
func fancy(a, b, c, d byte, bottom bool) (left, right int) {
	ia, ib, ic, id := int(a), int(b), int(c), int(d)
	avg := ia + ib + ic + id + 8
	diag12 := (avg + 2*(ib+ic)) >> 3
	diag03 := (avg + 2*(ia+id)) >> 3
	if bottom {
		return (diag03 + ic) >> 1, (diag12 + id) >> 1
	}
	return (diag12 + ia) >> 1, (diag03 + ib) >> 1
}

// yuvToRGB is libwebp's VP8YuvToRgb: BT.601 limited range in 14-bit fixed
// point, with multiplies that emulate SSE2's mulhi.
func yuvToRGB(d []byte, y byte, u, v int) {
	mulHi := func(v, coeff int) int { return (v * coeff) >> 8 }
	yy := mulHi(int(y), 19077)
	d[0] = webpClip(yy + mulHi(v, 26149) - 14234)
	d[1] = webpClip(yy - mulHi(u, 6419) - mulHi(v, 13320) + 8708)
	d[2] = webpClip(yy + mulHi(u, 33050) - 17685)
}

func webpClip(v int) byte {
	if v&^(256<<6-1) == 0 {
		return byte(v >> 6)
	}
	if v < 0 {
		return 0
	}
	return 255
}
