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

// resampleISA is the horizontal pass's code (vis_horizontal's isa): -1, the best this CPU
// runs; the tests set it lower to check each against the others.
var resampleISA = -1

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

// resampleGeom is where the resize of a source, and the crop after it, read and write:
// output [xa, xb) × [ya, yb) of the resized image (the crop's origin at x0, y0; the rest
// of the crop is padding) reads source rows [r0, r1) with weights vy and the columns of
// hx.
type resampleGeom struct {
	oc, oh, ow, plane int
	x0, y0            int
	xa, xb, ya, yb    int
	hx, vy            *axis
	r0, r1            int
}

// geom returns the resize's geometry for an upright fullW×fullH image decoded at 1/scale
// into w×h pixels; ok is false when the crop holds no pixel of the image.
func (t Transform) geom(fullW, fullH, w, h, scale int) (g resampleGeom, ok bool) {
	g.oc, g.oh, g.ow = t.OutputShape()
	g.plane = g.oh * g.ow
	rw, rh := t.resizedSize(fullW, fullH)
	g.x0, g.y0 = cropOrigin(rw, g.ow), cropOrigin(rh, g.oh)
	g.xa, g.xb = max(g.x0, 0), min(g.x0+g.ow, rw)
	g.ya, g.yb = max(g.y0, 0), min(g.y0+g.oh, rh)
	if g.xa >= g.xb || g.ya >= g.yb {
		return g, false // cannot happen for a centered crop, but keeps the indexing safe
	}
	g.hx = pilAxis(w, float32(fullW)/float32(scale), rw, g.xa, g.xb)
	g.vy = pilAxis(h, float32(fullH)/float32(scale), rh, g.ya, g.yb)
	last := len(g.vy.start) - 1
	g.r0, g.r1 = int(g.vy.start[0]), int(g.vy.start[last]+g.vy.n[last])
	return g, true
}

// pad writes the padding value into every plane of dst when the crop is larger than the
// resized image.
func (g *resampleGeom) pad(lut *[3][256]float32, dst []float32) {
	if g.xb-g.xa < g.ow || g.yb-g.ya < g.oh {
		for ch := range g.oc {
			pad := lut[ch][0]
			d := dst[ch*g.plane : (ch+1)*g.plane]
			for i := range d {
				d[i] = pad
			}
		}
	}
}

// check panics unless the C passes, which check nothing, stay inside a source of w×h
// pixels of c channels, tmp and dst: the weights' pixels inside a row, and dst's planes.
func (g *resampleGeom) check(w, h, c int, dst []float32) {
	if g.r0 < 0 || g.r1 > h || len(g.hx.start) != g.xb-g.xa || len(g.vy.start) != g.yb-g.ya ||
		len(dst) < g.oc*g.plane || (c != 1 && c != 3) || (c == 3 && g.oc != 3) {
		panic("vision: resample arguments out of range")
	}
	for i := range g.hx.start {
		if g.hx.start[i] < 0 || int(g.hx.start[i]+g.hx.n[i]) > w {
			panic("vision: resample weights out of range")
		}
	}
}

// resampleInto resizes src, center-crops and normalizes it into dst (CHW).
// src has 1 or 3 channels; a gray source for RGB output is resized once and
// written to all three planes, which is what PIL's convert("RGB") then resize
// amounts to.
func (t Transform) resampleInto(src *raster, dst []float32) {
	g, ok := t.geom(src.fullW, src.fullH, src.w, src.h, src.scale)
	lut := t.normLUT(g.oc)
	defer lutPool.Put(lut)
	g.pad(lut, dst)
	if !ok {
		return
	}
	c := src.c
	nx := g.xb - g.xa
	// Horizontal pass over the source rows the vertical pass reads.
	tmpBuf := pixPool.get((g.r1 - g.r0) * nx * c)
	defer pixPool.put(tmpBuf)
	tmp := *tmpBuf
	tstride, sstride := nx*c, src.w*c
	g.check(src.w, src.h, c, dst)
	if len(src.pix) < src.h*sstride {
		panic("vision: resample arguments out of range")
	}
	hx := g.hx
	C.vis_horizontal((*C.uint8_t)(unsafe.Pointer(&tmp[0])), C.int(tstride), (*C.uint8_t)(unsafe.Pointer(&src.pix[0])), C.int(sstride),
		C.int(g.r0), C.int(g.r1), C.int(c), (*C.int32_t)(&hx.start[0]), (*C.int32_t)(&hx.n[0]), (*C.int32_t)(&hx.k[0]), C.int(hx.ksize), C.int(nx), C.int(resampleISA))
	g.vertical(tmp, c, lut, dst)
}

// vertical is the vertical pass from tmp, the horizontal pass's rows [r0, r1) of c
// channels: one output row at a time into an accumulator row, then clipped and normalized
// straight into dst.
func (g *resampleGeom) vertical(tmp []byte, c int, lut *[3][256]float32, dst []float32) {
	nx := g.xb - g.xa
	tstride := nx * c
	if len(tmp) < (g.r1-g.r0)*tstride {
		panic("vision: resample arguments out of range")
	}
	accBuf := accPool.get(tstride)
	defer accPool.put(accBuf)
	acc := *accBuf
	vy := g.vy
	C.vis_vertical(C.vis_vertical_args{
		dst: (*C.float)(&dst[0]), base: C.int((g.ya-g.y0)*g.ow + (g.xa - g.x0)), ow: C.int(g.ow), plane: C.int(g.plane), nx: C.int(nx), oc: C.int(g.oc),
		tmp: (*C.uint8_t)(unsafe.Pointer(&tmp[0])), tstride: C.int(tstride), r0: C.int(g.r0), c: C.int(c),
		start: (*C.int32_t)(&vy.start[0]), n: (*C.int32_t)(&vy.n[0]), k: (*C.int32_t)(&vy.k[0]), ksize: C.int(vy.ksize), rows: C.int(g.yb - g.ya),
		lut: (*C.float)(&lut[0][0]), acc: (*C.int32_t)(&acc[0]),
	})
}

// visISA reports the horizontal pass's code for isa on this CPU (vis_isa).
func visISA(isa int) int { return int(C.vis_isa(C.int(isa))) }
