package vision

// The TurboJPEG API of libjpeg-turbo decodes with the same IDCT (ISLOW) and
// chroma upsampling ("fancy") as the libjpeg PIL links, so at full size its
// pixels equal PIL's; it also decodes at 1/2, 1/4 and 1/8 size in the DCT
// domain, which skips most of the work for photos far larger than 256 pixels.

/*
#cgo LDFLAGS: -lturbojpeg
#include <stdio.h>
#include <turbojpeg.h>

typedef struct {
	int rc, width, height, subsamp, colorspace;
} tjd_header;

// tjd_read_header wraps tjDecompressHeader3, returning the results by value
// so that Go passes no pointers to its own memory (which would move them to
// the heap). rc is tjDecompressHeader3's return code: 0, or -1 on error. The
// sizes are zeroed first because it can succeed without setting them (on a
// stream with tables but no frame).
static tjd_header tjd_read_header(tjhandle h, const unsigned char *buf, unsigned long n) {
	tjd_header r = {0, 0, 0, 0, 0};
	r.rc = tjDecompressHeader3(h, buf, n, &r.width, &r.height, &r.subsamp, &r.colorspace);
	return r;
}

// tjd_result is tjd_decompress's outcome: rc is tjDecompress2's, and where it is -1, fatal
// says whether the error was (TJERR_FATAL) and msg is the library's text.
typedef struct {
	int rc, fatal;
	char msg[200];
} tjd_result;

// tjd_decompress wraps tjDecompress2 and reads its error in the same call: a warning's
// text is in a thread-local buffer, which a second call from Go, maybe on another
// thread, could read as another decode's.
static tjd_result tjd_decompress(tjhandle h, const unsigned char *buf, unsigned long n,
		unsigned char *dst, int w, int hgt, int pf, int flags) {
	tjd_result r;
	r.rc = tjDecompress2(h, buf, n, dst, w, 0, hgt, pf, flags);
	r.fatal = 0;
	r.msg[0] = 0;
	if (r.rc != 0) {
		r.fatal = tjGetErrorCode(h) == TJERR_FATAL;
		snprintf(r.msg, sizeof r.msg, "%s", tjGetErrorStr2(h));
	}
	return r;
}
*/
import "C"

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"unsafe"
)

// jpegHeader is what tjDecompressHeader3 reports.
type jpegHeader struct {
	w, h       int
	colorspace C.int
}

// turboError turns the handle's last error into an ErrCorrupt.
func turboError(h C.tjhandle, what string) error {
	return fmt.Errorf("%w: jpeg %s: %s", ErrCorrupt, what, C.GoString(C.tjGetErrorStr2(h)))
}

// turboHeader reads a JPEG's size and colour space without decoding it.
func turboHeader(img []byte) (jpegHeader, error) {
	h := C.tjInitDecompress()
	if h == nil {
		return jpegHeader{}, errors.New("vision: tjInitDecompress failed")
	}
	defer C.tjDestroy(h)
	return readTurboHeader(h, img)
}

func readTurboHeader(h C.tjhandle, img []byte) (jpegHeader, error) {
	r := C.tjd_read_header(h, (*C.uchar)(unsafe.Pointer(&img[0])), C.ulong(len(img)))
	if r.rc != 0 {
		return jpegHeader{}, turboError(h, "header")
	}
	if r.width <= 0 || r.height <= 0 {
		return jpegHeader{}, fmt.Errorf("%w: jpeg has no usable frame header (size %dx%d)", ErrCorrupt, r.width, r.height)
	}
	return jpegHeader{w: int(r.width), h: int(r.height), colorspace: r.colorspace}, nil
}

// dctScales are the reductions worth asking libjpeg-turbo for: 1/2, 1/4 and
// 1/8 have dedicated reduced IDCTs; 3/8, 5/8 and the like are slower and
// would save little. Only those the library lists are kept.
var dctScales = sync.OnceValue(func() []int {
	var n C.int
	p := C.tjGetScalingFactors(&n)
	if p == nil {
		return nil
	}
	var out []int
	for _, f := range unsafe.Slice(p, int(n)) {
		if f.num == 1 && (f.denom == 2 || f.denom == 4 || f.denom == 8) {
			out = append(out, int(f.denom))
		}
	}
	return out
})

// jpegScale picks the largest DCT reduction that keeps the decoded image at
// least as big as the resize target in both directions, so the bilinear
// filter still does the final, antialiased step, as it does in PIL. w and h
// are the upright size of the JPEG. The result is sharper than PIL's, whose
// filter spans twice the reduction: handlers' TestJPEGScalingGate measures
// what that changes (only JPEGDCTScaling turns it on).
func (t Transform) jpegScale(w, h int) int {
	if !t.JPEGDCTScaling {
		return 1
	}
	if t.Resize == 0 && t.Width == 0 {
		return 1 // no resize: every decoded pixel is output
	}
	tw, th := t.resizedSize(w, h)
	best := 1
	for _, d := range dctScales() {
		if w >= tw*d && h >= th*d && d > best {
			best = d
		}
	}
	return best
}

// decodeTurbo decodes a JPEG with libjpeg-turbo, at reduced size when the
// transform allows, and turns it upright.
func (t Transform) decodeTurbo(img []byte) (raster, error) {
	h := C.tjInitDecompress()
	if h == nil {
		return raster{}, errors.New("vision: tjInitDecompress failed")
	}
	defer C.tjDestroy(h)
	hdr, err := readTurboHeader(h, img)
	if err != nil {
		return raster{}, err
	}
	if err := t.checkPixels("jpeg", hdr.w, hdr.h); err != nil {
		return raster{}, err
	}
	orientation := jpegOrientation(img)
	uw, uh := hdr.w, hdr.h
	if orientation >= 5 {
		uw, uh = uh, uw
	}
	scale := t.jpegScale(uw, uh)

	pf, c := C.TJPF_RGB, 3
	switch hdr.colorspace {
	case C.TJCS_GRAY:
		pf, c = C.TJPF_GRAY, 1
	case C.TJCS_CMYK, C.TJCS_YCCK:
		pf, c = C.TJPF_CMYK, 4
	}
	// TJSCALED: libjpeg-turbo rounds scaled sizes up.
	sw, sh := (hdr.w+scale-1)/scale, (hdr.h+scale-1)/scale
	r := newRaster(sw, sh, c)
	r.scale = scale
	r.fullW, r.fullH = hdr.w, hdr.h
	// Decoded whole, a photo's columns and rows outside the crop need not be: libjpeg
	// decodes only the window the resize reads (found upright, then mapped to the stored
	// image), with the same IDCT and upsampling, skipping the rest's IDCT and colour
	// conversion (most of a 16:9 photo's width).
	if x0, x1, y0, y1, ok := t.sourceWindow(uw, uh); ok && scale == 1 && (x1-x0)*(y1-y0) < hdr.w*hdr.h*9/10 {
		sx0, sx1, sy0, sy1 := x0, x1, y0, y1
		if orientation >= 2 && orientation <= 8 {
			sx0, sx1, sy0, sy1 = storedRect(orientation, hdr.w, hdr.h, x0, x1, y0, y1)
		}
		if err := decodeJPEGWindow(img, &r, sx0, sx1, sy0, sy1); err != nil {
			r.release()
			return raster{}, err
		}
		if c == 4 {
			r.cmykToRGB()
		}
		// Only the window was decoded, and only it is turned upright: for a phone's
		// portrait photo (orientation 6) that is half of a transpose of the whole.
		return r.orientWindow(orientation, x0, x1, y0, y1), nil
	}
	// LIMITSCANS refuses progressive JPEGs with absurd scan counts, a CPU bomb
	// that the pixel limit does not catch.
	if res := C.tjd_decompress(h, (*C.uchar)(unsafe.Pointer(&img[0])), C.ulong(len(img)),
		(*C.uchar)(unsafe.Pointer(&r.pix[0])), C.int(sw), C.int(sh), C.int(pf), C.TJFLAG_LIMITSCANS); res.rc != 0 {
		msg := C.GoString(&res.msg[0])
		// Warnings leave a usable image. PIL likewise shrugs off "extraneous
		// bytes" and the like, but refuses truncated files, and so do we.
		truncated := strings.Contains(strings.ToLower(msg), "premature end")
		if truncated {
			r.release()
			return raster{}, fmt.Errorf("%w: jpeg is truncated (%s)", ErrCorrupt, msg)
		}
		if res.fatal != 0 {
			r.release()
			return raster{}, fmt.Errorf("%w: jpeg: %s", ErrCorrupt, msg)
		}
	}
	if c == 4 {
		r.cmykToRGB()
	}
	return r.orient(orientation), nil
}
