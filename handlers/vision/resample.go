package vision

// #cgo CFLAGS: -O3
// #include "resample.h"
import "C"

import (
	"math"
	"sync"
	"unsafe"
)

// The resize is PIL's Image.resize(BILINEAR) as torchvision 0.14 calls it on
// PIL images: a triangle filter whose support widens with the downscale factor
// (so it antialiases), normalized per output pixel, turned into 22-bit fixed
// point, run horizontally then vertically with rounding to 8 bits in between.
// Following it step for step makes the output equal PIL's, not merely close.
//
// Output pixels are independent, so only those inside the center crop are
// computed: for 1920x1080 → 455x256 → 224x224 that skips half the work.

// pilPrecisionBits is PIL's PRECISION_BITS: 32 bits less 8 for the pixel and 2
// for overshoot of filters with negative lobes.
const pilPrecisionBits = 32 - 8 - 2

// resizedSize returns the size after the resize step and before the crop, for
// an upright image of w×h.
func (t Transform) resizedSize(w, h int) (int, int) {
	switch {
	case t.Width > 0:
		return t.Width, t.Height
	case t.Resize > 0:
		// torchvision's _compute_resized_output_size: the long side is
		// int(size * long / short), truncated.
		if w <= h {
			return t.Resize, int(float64(t.Resize*h) / float64(w))
		}
		return int(float64(t.Resize*w) / float64(h)), t.Resize
	}
	return w, h
}

// cropOrigin returns where a centered crop of length crop starts on an axis
// of length size, as torchvision's center_crop computes it: Python's round
// (half to even) of the margin, or minus the left/top padding when the crop
// is the larger.
func cropOrigin(size, crop int) int {
	if crop > size {
		return -((crop - size) / 2)
	}
	return int(math.RoundToEven(float64(size-crop) / 2))
}

// axis holds PIL's bilinear weights for output pixels [lo, hi) of one axis:
// output pixel lo+i reads n[i] source pixels from start[i] with weights
// k[i*ksize:].
type axis struct {
	ksize    int
	start, n []int32
	k        []int32
}

type axisKey struct {
	in     int
	box    float32
	out    int
	lo, hi int
}

// Weights are cached because a stream of same-sized photos (a camera, a
// benchmark) would otherwise recompute identical tables. The cache is small and
// simply emptied when full; a miss costs microseconds.
var axisCache struct {
	sync.Mutex
	m map[axisKey]*axis
}

const axisCacheMax = 256

// pilAxis returns the weights for resampling an axis of in source pixels, of
// which [0, box) is the image (box < in when the decoder rounded a DCT-scaled
// size up), to out pixels, of which [lo, hi) are wanted. It is PIL's
// precompute_coeffs followed by normalize_coeffs_8bpc.
func pilAxis(in int, box float32, out, lo, hi int) *axis {
	key := axisKey{in, box, out, lo, hi}
	axisCache.Lock()
	a := axisCache.m[key]
	axisCache.Unlock()
	if a != nil {
		return a
	}

	scale := float64(box) / float64(out)
	filterscale := max(scale, 1)
	support := 1.0 * filterscale // the triangle's support is 1
	ksize := int(math.Ceil(support))*2 + 1
	ss := 1.0 / filterscale
	a = &axis{
		ksize: ksize,
		start: make([]int32, hi-lo),
		n:     make([]int32, hi-lo),
		k:     make([]int32, (hi-lo)*ksize),
	}
	w := make([]float64, ksize)
	for xx := lo; xx < hi; xx++ {
		center := (float64(xx) + 0.5) * scale
		xmin := max(int(center-support+0.5), 0)
		xmax := min(int(center+support+0.5), in) - xmin
		xmax = min(max(xmax, 0), ksize)
		ww := 0.0
		for x := range xmax {
			v := math.Abs((float64(x+xmin) - center + 0.5) * ss)
			v = max(1-v, 0)
			w[x] = v
			ww += v
		}
		k := a.k[(xx-lo)*ksize:]
		for x := range xmax {
			v := w[x]
			if ww != 0 {
				v /= ww
			}
			// normalize_coeffs_8bpc rounds half away from zero; the
			// triangle has no negative lobes, so only this branch applies.
			k[x] = int32(0.5 + v*(1<<pilPrecisionBits))
		}
		a.start[xx-lo], a.n[xx-lo] = int32(xmin), int32(xmax)
	}

	axisCache.Lock()
	if len(axisCache.m) >= axisCacheMax || axisCache.m == nil {
		axisCache.m = make(map[axisKey]*axis)
	}
	axisCache.m[key] = a
	axisCache.Unlock()
	return a
}

// lutPool keeps the tables the resize hands to C, which would otherwise be allocated per
// image (a pointer passed to C escapes).
var lutPool sync.Pool

// normLUT maps a byte to its ToTensor+Normalize value per channel. It is the
// same float32 arithmetic as torch, (v/255 - mean) / std with true divisions,
// so the results are bit-identical, and 768 divisions per image instead of
// two per output element.
func (t Transform) normLUT(c int) *[3][256]float32 {
	lut, _ := lutPool.Get().(*[3][256]float32)
	if lut == nil {
		lut = new([3][256]float32)
	}
	for ch := range c {
		mean, std := float32(0), float32(1)
		if t.Mean != nil {
			mean, std = t.Mean[ch], t.Std[ch]
		}
		for v := range 256 {
			lut[ch][v] = (float32(v)/255 - mean) / std
		}
	}
	return lut
}

// resampleInto resizes src, center-crops and normalizes it into dst (CHW).
// src has 1 or 3 channels; a gray source for RGB output is resized once and
// written to all three planes, which is what PIL's convert("RGB") then resize
// amounts to.
func (t Transform) resampleInto(src *raster, dst []float32) {
	oc, oh, ow := t.OutputShape()
	rw, rh := t.resizedSize(src.fullW, src.fullH)
	x0, y0 := cropOrigin(rw, ow), cropOrigin(rh, oh)
	// [xa, xb) × [ya, yb) is the part of the resized image inside the crop;
	// output outside it is padding.
	xa, xb := max(x0, 0), min(x0+ow, rw)
	ya, yb := max(y0, 0), min(y0+oh, rh)
	lut := t.normLUT(oc)
	defer lutPool.Put(lut)
	plane := oh * ow
	if xb-xa < ow || yb-ya < oh {
		for ch := range oc {
			pad := lut[ch][0]
			d := dst[ch*plane : (ch+1)*plane]
			for i := range d {
				d[i] = pad
			}
		}
	}

	if xa >= xb || ya >= yb {
		return // cannot happen for a centered crop, but keeps the indexing safe
	}

	c := src.c
	nx := xb - xa
	hx := pilAxis(src.w, float32(src.fullW)/float32(src.scale), rw, xa, xb)
	vy := pilAxis(src.h, float32(src.fullH)/float32(src.scale), rh, ya, yb)
	last := len(vy.start) - 1
	r0, r1 := int(vy.start[0]), int(vy.start[last]+vy.n[last])

	// Horizontal pass over the source rows the vertical pass reads.
	tmpBuf := pixPool.get((r1 - r0) * nx * c)
	defer pixPool.put(tmpBuf)
	tmp := *tmpBuf
	tstride, sstride := nx*c, src.w*c
	// What the C passes read and write, checked here since they check nothing: source
	// rows [r0, r1) of src, the weights' pixels inside a row, and dst's planes.
	if r0 < 0 || r1 > src.h || len(src.pix) < src.h*sstride || len(hx.start) != nx || len(vy.start) != yb-ya ||
		len(dst) < oc*plane || (c != 1 && c != 3) || (c == 3 && oc != 3) {
		panic("vision: resample arguments out of range")
	}
	for i := range hx.start {
		if hx.start[i] < 0 || int(hx.start[i]+hx.n[i]) > src.w {
			panic("vision: resample weights out of range")
		}
	}
	C.vis_horizontal((*C.uint8_t)(unsafe.Pointer(&tmp[0])), C.int(tstride), (*C.uint8_t)(unsafe.Pointer(&src.pix[0])), C.int(sstride),
		C.int(r0), C.int(r1), C.int(c), (*C.int32_t)(&hx.start[0]), (*C.int32_t)(&hx.n[0]), (*C.int32_t)(&hx.k[0]), C.int(hx.ksize), C.int(nx))

	// Vertical pass, one output row at a time into an accumulator row, then clip and
	// normalize straight into dst.
	accBuf := accPool.get(tstride)
	defer accPool.put(accBuf)
	acc := *accBuf
	C.vis_vertical(C.vis_vertical_args{
		dst: (*C.float)(&dst[0]), base: C.int((ya-y0)*ow + (xa - x0)), ow: C.int(ow), plane: C.int(plane), nx: C.int(nx), oc: C.int(oc),
		tmp: (*C.uint8_t)(unsafe.Pointer(&tmp[0])), tstride: C.int(tstride), r0: C.int(r0), c: C.int(c),
		start: (*C.int32_t)(&vy.start[0]), n: (*C.int32_t)(&vy.n[0]), k: (*C.int32_t)(&vy.k[0]), ksize: C.int(vy.ksize), rows: C.int(yb - ya),
		lut: (*C.float)(&lut[0][0]), acc: (*C.int32_t)(&acc[0]),
	})
}
