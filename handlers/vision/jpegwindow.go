package vision

// #cgo CFLAGS: -O2
// #cgo LDFLAGS: -l:libjpeg.a
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
	switch {
	case res.truncated != 0:
		// PIL refuses truncated files too; libjpeg only warns.
		return fmt.Errorf("%w: jpeg is truncated (Premature end of JPEG file)", ErrCorrupt)
	case res.rc != 0:
		return fmt.Errorf("%w: jpeg: %s", ErrCorrupt, C.GoString(&res.msg[0]))
	}
	return nil
}
