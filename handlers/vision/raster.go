package vision

import (
	"sync"
	"unsafe"
)

// raster is a decoded 8-bit image: rows of packed RGB (c == 3), gray (c == 1)
// or, straight out of a CMYK JPEG, CMYK (c == 4) pixels, with no row padding.
// Its pixel buffer comes from pixPool; release returns it.
type raster struct {
	pix  []byte
	w, h int
	c    int
	// scale is how much the decoder shrank the image (1, 2, 4 or 8). The
	// resize maps output pixels onto the full-size image, w*scale by h*scale
	// give or take the last block, so DCT scaling does not shift the output.
	scale int
	// fullW, fullH are the upright size of the encoded image.
	fullW, fullH int

	buf *[]byte
}

// Byte and int32 buffers are pooled because a decoded photo is megabytes and
// Apply runs once per request.
var (
	pixPool slicePool[byte]
	accPool slicePool[int32]
)

// slicePool hands out slices of at least the asked length. Pointers to slices
// are pooled so that Put does not allocate.
type slicePool[T any] struct{ p sync.Pool }

func (p *slicePool[T]) get(n int) *[]T {
	if b, ok := p.p.Get().(*[]T); ok {
		if cap(*b) >= n {
			*b = (*b)[:n]
			return b
		}
		// Too small: drop it and let the bigger one take its place.
	}
	b := make([]T, n)
	return &b
}

// maxPooledBytes bounds a buffer the pools keep. A pooled buffer lives until two garbage
// collections pass, and an idle server collects rarely, so a burst of huge images would
// leave their buffers held while nothing runs (docs/guide/attacks.md). Buffers of typical
// photos (up to about 10 Mpx of RGB) are reused; larger ones go back to the garbage
// collector at once.
// Once the server is idle, the daemon's memory trim runs the two collections that empty
// the pools (memtrim.Trim).
const maxPooledBytes = 32 << 20

func (p *slicePool[T]) put(b *[]T) {
	var zero T
	if uintptr(cap(*b))*unsafe.Sizeof(zero) > maxPooledBytes {
		return
	}
	p.p.Put(b)
}

// newRaster returns a w×h raster with c channels and uninitialized pixels.
func newRaster(w, h, c int) raster {
	buf := pixPool.get(w * h * c)
	return raster{pix: *buf, w: w, h: h, c: c, scale: 1, fullW: w, fullH: h, buf: buf}
}

func (r *raster) release() {
	if r.buf != nil {
		pixPool.put(r.buf)
		r.buf, r.pix = nil, nil
	}
}

// toGray converts RGB to luma in place, as PIL's convert("L") does: ITU-R
// 601-2 weights in 16-bit fixed point, rounded. (PIL documents the weights as
// 299/1000, 587/1000, 114/1000, but truncating with those disagrees with PIL
// on about half of all colours.)
func (r *raster) toGray() {
	n := r.w * r.h
	p := r.pix
	for i := 0; i < n; i++ {
		s := p[i*3 : i*3+3 : i*3+3]
		p[i] = byte((uint32(s[0])*19595 + uint32(s[1])*38470 + uint32(s[2])*7471 + 0x8000) >> 16)
	}
	r.pix = p[:n]
	r.c = 1
}

// cmykToRGB converts a raster of CMYK as stored in a JPEG to RGB in place.
// Like PIL, it takes the stored values to be Adobe-style inverted (255 = no
// ink), which is how nearly every CMYK JPEG is written, then applies PIL's
// CMYK-to-RGB formula.
func (r *raster) cmykToRGB() {
	n := r.w * r.h
	p := r.pix
	for i := 0; i < n; i++ {
		s := p[i*4 : i*4+4 : i*4+4]
		c, m, y, nk := 255-s[0], 255-s[1], 255-s[2], int(s[3])
		d := p[i*3 : i*3+3 : i*3+3]
		d[0] = clipByte(nk - mulDiv255(int(c), nk))
		d[1] = clipByte(nk - mulDiv255(int(m), nk))
		d[2] = clipByte(nk - mulDiv255(int(y), nk))
	}
	r.pix = p[:n*3]
	r.c = 3
}

// mulDiv255 is a*b/255 rounded, PIL's MULDIV255.
func mulDiv255(a, b int) int {
	t := a*b + 128
	return ((t >> 8) + t) >> 8
}

func clipByte(v int) byte {
	if v < 0 {
		return 0
	}
	if v > 255 {
		return 255
	}
	return byte(v)
}

// orientMap is EXIF orientation o as index arithmetic over a stored w×h image: the upright
// pixel (x, y) is stored pixel base + x*dx + y*dy (row-major, in pixels).
func orientMap(o, w, h int) (base, dx, dy int) {
	switch o {
	case 2: // mirrored left-right
		return w - 1, -1, w
	case 3: // rotated 180°
		return h*w - 1, -1, -w
	case 4: // mirrored top-bottom
		return (h - 1) * w, 1, -w
	case 5: // transposed
		return 0, w, 1
	case 6: // needs 90° clockwise
		return (h - 1) * w, -w, 1
	case 7: // transversed
		return h*w - 1, -w, -1
	case 8: // needs 90° counter-clockwise
		return w - 1, w, -1
	}
	return 0, 1, w
}

// storedRect maps the upright rectangle [x0, x1) × [y0, y1) of a w×h image stored with
// EXIF orientation o to the rectangle of the stored image that holds it.
func storedRect(o, w, h, x0, x1, y0, y1 int) (sx0, sx1, sy0, sy1 int) {
	base, dx, dy := orientMap(o, w, h)
	sx0, sy0, sx1, sy1 = w, h, 0, 0
	for _, x := range []int{x0, x1 - 1} {
		for _, y := range []int{y0, y1 - 1} {
			i := base + x*dx + y*dy
			sx, sy := i%w, i/w
			sx0, sx1, sy0, sy1 = min(sx0, sx), max(sx1, sx+1), min(sy0, sy), max(sy1, sy+1)
		}
	}
	return sx0, sx1, sy0, sy1
}

// orient returns r turned upright for an EXIF orientation (1–8), releasing r,
// or r itself for 1 and unknown values. It is PIL's ImageOps.exif_transpose.
func (r raster) orient(o int) raster {
	w, h := r.w, r.h
	if o >= 5 {
		w, h = h, w
	}
	return r.orientWindow(o, 0, w, 0, h)
}

// orientWindow is orient where the resize reads only the upright window [x0, x1) × [y0, y1)
// (sourceWindow's): the pixels outside it are left unwritten, as the window decode left
// them. The window is copied in strips of orientBlock columns, so that a transpose reads
// each source cache line for several output rows before it is evicted.
func (r raster) orientWindow(o, x0, x1, y0, y1 int) raster {
	if o < 2 || o > 8 {
		return r
	}
	w, h, c := r.w, r.h, r.c
	base, dx, dy := orientMap(o, w, h)
	dw, dh := w, h
	if o >= 5 {
		dw, dh = h, w
	}
	if x0 < 0 || x1 > dw || y0 < 0 || y1 > dh || x0 > x1 || y0 > y1 {
		panic("vision: orient window out of range")
	}
	out := newRaster(dw, dh, c)
	out.scale = r.scale
	out.fullW, out.fullH = r.fullW, r.fullH
	if o >= 5 {
		out.fullW, out.fullH = r.fullH, r.fullW
	}
	sp, dp := r.pix, out.pix
	for bx := x0; bx < x1; bx += orientBlock {
		ex := min(bx+orientBlock, x1)
		for y := y0; y < y1; y++ {
			s := base + y*dy + bx*dx
			row := dp[(y*dw+bx)*c : (y*dw+ex)*c]
			if c == 3 {
				for x := 0; x < len(row); x += 3 {
					p := sp[s*3 : s*3+3 : s*3+3]
					row[x], row[x+1], row[x+2] = p[0], p[1], p[2]
					s += dx
				}
			} else {
				for x := 0; x < len(row); x += c {
					copy(row[x:x+c], sp[s*c:s*c+c])
					s += dx
				}
			}
		}
	}
	r.release()
	return out
}

// orientBlock is orientWindow's strip width, in pixels: a transpose's strip reads this many
// source rows, each one cache line of 21 RGB pixels for as many output rows.
const orientBlock = 32
