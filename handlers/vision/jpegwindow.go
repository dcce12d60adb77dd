package vision

// #cgo CFLAGS: -O2
// #cgo LDFLAGS: -l:libjpeg.a -lturbojpeg
// #include <turbojpeg.h>
// #include "jpegwindow.h"
import "C"

import (
	"fmt"
	"unsafe"
)

// jpegWindowMargin is how far past the pixels the resize reads a window decode reaches:
// the pixels at a window's edge may differ from a whole decode's (libjpeg's fancy
// upsampling and its skipped rows start afresh there), so that edge stays out of what the
// resize reads, and the pixels it reads are PIL's.
const jpegWindowMargin = 16

// sourceWindow returns the columns [x0, x1) and rows [y0, y1) of an upright w×h image,
// decoded at full size, that resampleInto reads for t's resize and crop, widened by
// jpegWindowMargin; ok is false when t reads every pixel.
func (t Transform) sourceWindow(w, h int) (x0, x1, y0, y1 int, ok bool) {
	if t.Resize == 0 && t.Width == 0 {
		return 0, w, 0, h, false
	}
	_, oh, ow := t.OutputShape()
	rw, rh := t.resizedSize(w, h)
	cx, cy := cropOrigin(rw, ow), cropOrigin(rh, oh)
	xa, xb := max(cx, 0), min(cx+ow, rw)
	ya, yb := max(cy, 0), min(cy+oh, rh)
	if xa >= xb || ya >= yb {
		return 0, w, 0, h, false
	}
	span := func(a *axis) (lo, hi int) {
		lo, hi = int(a.start[0]), 0
		for i := range a.start {
			lo, hi = min(lo, int(a.start[i])), max(hi, int(a.start[i]+a.n[i]))
		}
		return lo, hi
	}
	// The same weights resampleInto computes (and pilAxis caches) for a full-size decode.
	x0, x1 = span(pilAxis(w, float32(w), rw, xa, xb))
	y0, y1 = span(pilAxis(h, float32(h), rh, ya, yb))
	m := jpegWindowMargin
	return max(x0-m, 0), min(x1+m, w), max(y0-m, 0), min(y1+m, h), true
}

// decodeJPEGWindow decodes rows [y0, y1) and columns [x0, x1) (at least) of img into r, a raster of
// the whole image's size, with libjpeg's defaults (jw_decode).
func decodeJPEGWindow(img []byte, r *raster, x0, x1, y0, y1 int) error {
	res := C.jw_decode((*C.uchar)(unsafe.Pointer(&img[0])), C.size_t(len(img)), (*C.uchar)(unsafe.Pointer(&r.pix[0])),
		C.int(r.w), C.int(r.h), C.int(r.c), C.int(x0), C.int(x1), C.int(y0), C.int(y1))
	return jwError(res)
}

// fastHuffman says that the one-pass decode reads the entropy-coded data with jpeghuff.c's
// decoder; BenchmarkPreprocess turns it off to time libjpeg's own.
var fastHuffman = true

// decodeJPEGHuff is decodeJPEGWindow with libjpeg's own Huffman decoder (fast false) or
// jpeghuff.c's (true, what every decode here uses), into a new w*h*c raster; fastUsed says
// whether jpeghuff.c's decoded it (it leaves progressive and arithmetic files to libjpeg).
// The tests compare the two decoders with it.
func decodeJPEGHuff(img []byte, w, h, c, x0, x1, y0, y1 int, fast bool) (pix []byte, fastUsed bool, err error) {
	pix = make([]byte, w*h*c)
	res := C.jw_decode_huff((*C.uchar)(unsafe.Pointer(&img[0])), C.size_t(len(img)), (*C.uchar)(unsafe.Pointer(&pix[0])),
		C.int(w), C.int(h), C.int(c), C.int(x0), C.int(x1), C.int(y0), C.int(y1), C.int(boolC(fast)))
	return pix, res.fast_huffman != 0, jwError(res)
}

// resizeJPEG is Apply for a JPEG whose decode and resize can run as one pass: an RGB, CMYK or
// gray photo, upright or mirrored or flipped by its EXIF orientation (2-4), decoded at full
// size and resized. libjpeg decodes the window the resize
// reads one row at a time, each row resized horizontally while it is in the cache
// (jw_decode_resize), so the decoded image is never written out whole; the pixels are those
// of decodeTurbo and resampleInto. done is false, and dst untouched, where img is not such a
// JPEG (or its header is bad): Apply then decodes it into a raster.
func (t Transform) resizeJPEG(img []byte, dst []float32) (done bool, err error) {
	if t.PureGoJPEG {
		return false, nil
	}
	hdr, err := turboHeader(img)
	if err != nil {
		return false, nil
	}
	// c is the decoded row's bytes a pixel, pc the horizontal pass's: a CMYK row (4) is
	// turned into RGB (3) before it.
	c, pc := 3, 3
	switch hdr.colorspace {
	case C.TJCS_GRAY:
		c, pc = 1, 1
	case C.TJCS_CMYK, C.TJCS_YCCK:
		c = 4
	}
	// EXIF orientations 2-4 mirror or flip the image, which the decode undoes row by row;
	// 5-8 turn rows into columns, which it cannot.
	o := jpegOrientation(img)
	if o >= 5 && o <= 8 || t.Gray && pc == 3 || t.jpegScale(hdr.w, hdr.h) != 1 {
		return false, nil
	}
	mirror, flip := o == 2 || o == 3, o == 3 || o == 4
	x0, x1, y0, _, ok := t.sourceWindow(hdr.w, hdr.h)
	if !ok {
		return false, nil
	}
	g, ok := t.geom(hdr.w, hdr.h, hdr.w, hdr.h, 1)
	if !ok || y0 > g.r0 {
		return false, nil
	}
	// The stored window: rows from a margin above those of upright rows [r0, r1).
	y1 := g.r1
	if flip {
		y0, y1 = max(hdr.h-g.r1-jpegWindowMargin, 0), hdr.h-g.r0
	}
	if mirror {
		x0, x1 = hdr.w-x1, hdr.w-x0
	}
	lut := t.normLUT(g.oc)
	defer lutPool.Put(lut)
	g.pad(lut, dst)
	g.check(hdr.w, hdr.h, pc, dst)
	nx := g.xb - g.xa
	// One buffer holds the horizontal pass's rows and, after them, the decoded row: two
	// sizes from one pool would have each often find the other's too small.
	ntmp, nrow := (g.r1-g.r0)*nx*pc, hdr.w*c
	nbuf := ntmp + nrow
	if mirror {
		nbuf += nrow
	}
	buf := pixPool.get(nbuf)
	defer pixPool.put(buf)
	tmp, row, hx := (*buf)[:ntmp], (*buf)[ntmp:ntmp+nrow], g.hx
	var mrow *C.uchar
	if mirror {
		mrow = (*C.uchar)(unsafe.Pointer(&(*buf)[ntmp+nrow]))
	}
	res := C.jw_decode_resize((*C.uchar)(unsafe.Pointer(&img[0])), C.size_t(len(img)), C.int(hdr.w), C.int(hdr.h), C.int(c),
		C.int(x0), C.int(x1), C.int(y0), C.int(y1), C.jw_resize_args{
			row: (*C.uchar)(unsafe.Pointer(&row[0])), mrow: mrow, tmp: (*C.uint8_t)(unsafe.Pointer(&tmp[0])), tstride: C.int(nx * pc),
			r0: C.int(g.r0), r1: C.int(g.r1), flip: C.int(boolC(flip)), mirror: C.int(boolC(mirror)),
			start: (*C.int32_t)(&hx.start[0]), n: (*C.int32_t)(&hx.n[0]), k: (*C.int32_t)(&hx.k[0]),
			ksize: C.int(hx.ksize), nout: C.int(nx), isa: C.int(resampleISA), huff: C.int(boolC(fastHuffman)),
		})
	if err := jwError(res); err != nil {
		return true, err
	}
	g.vertical(tmp, pc, lut, dst)
	return true, nil
}

// jwError is a jw_result as an error: ErrCorrupt for a truncated or damaged JPEG.
func jwError(res C.jw_result) error {
	switch {
	case res.truncated != 0:
		// PIL refuses truncated files too; libjpeg only warns.
		return fmt.Errorf("%w: jpeg is truncated (Premature end of JPEG file)", ErrCorrupt)
	case res.rc != 0:
		return fmt.Errorf("%w: jpeg: %s", ErrCorrupt, C.GoString(&res.msg[0]))
	}
	return nil
}

func boolC(b bool) int {
	if b {
		return 1
	}
	return 0
}
