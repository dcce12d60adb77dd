package vision

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/gif"
	"image/jpeg"
	"image/png"
	"io"
	"strings"

	"golang.org/x/image/bmp"
	"golang.org/x/image/webp"
)

// sniff names the format from the magic bytes. The decoders are called
// directly rather than through image.RegisterFormat, so that nothing else in
// the binary can change which formats a request may use.
func sniff(b []byte) (string, error) {
	switch {
	case len(b) == 0:
		return "", ErrEmpty
	case bytes.HasPrefix(b, []byte("\xff\xd8\xff")):
		return "jpeg", nil
	case bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")):
		return "png", nil
	case bytes.HasPrefix(b, []byte("GIF87a")), bytes.HasPrefix(b, []byte("GIF89a")):
		return "gif", nil
	case bytes.HasPrefix(b, []byte("BM")):
		return "bmp", nil
	case len(b) >= 12 && bytes.HasPrefix(b, []byte("RIFF")) && string(b[8:12]) == "WEBP":
		return "webp", nil
	case bytes.HasPrefix(b, []byte("II*\x00")), bytes.HasPrefix(b, []byte("MM\x00*")):
		return "", fmt.Errorf("%w: TIFF (use JPEG, PNG, GIF, BMP or WebP)", ErrUnsupported)
	}
	n := min(len(b), 8)
	return "", fmt.Errorf("%w: unrecognised leading bytes %q (want JPEG, PNG, GIF, BMP or WebP)", ErrUnsupported, b[:n])
}

// DecodeConfig returns the format ("jpeg", "png", "gif", "bmp" or "webp") and
// the upright size of an image (EXIF orientation applied for JPEG) without
// decoding the pixels.
func DecodeConfig(img []byte) (format string, w, h int, err error) {
	format, err = sniff(img)
	if err != nil {
		return "", 0, 0, err
	}
	if format == "jpeg" {
		hdr, err := turboHeader(img)
		if err != nil {
			return "", 0, 0, err
		}
		w, h = hdr.w, hdr.h
		if o := jpegOrientation(img); o >= 5 && o <= 8 {
			w, h = h, w
		}
		return format, w, h, nil
	}
	cfg, err := goDecodeConfig(format, img)
	if err != nil {
		return "", 0, 0, err
	}
	return format, cfg.Width, cfg.Height, nil
}

func goDecodeConfig(format string, img []byte) (image.Config, error) {
	r := bytes.NewReader(img)
	var cfg image.Config
	var err error
	switch format {
	case "jpeg":
		cfg, err = jpeg.DecodeConfig(r)
	case "png":
		cfg, err = png.DecodeConfig(r)
	case "gif":
		cfg, err = gif.DecodeConfig(r)
	case "bmp":
		cfg, err = bmp.DecodeConfig(r)
	case "webp":
		cfg, err = webp.DecodeConfig(r)
	}
	if err != nil {
		return cfg, corrupt(format, err)
	}
	if cfg.Width <= 0 || cfg.Height <= 0 {
		return cfg, fmt.Errorf("%w: %s header says %dx%d", ErrCorrupt, format, cfg.Width, cfg.Height)
	}
	return cfg, nil
}

// corrupt wraps a decoder's error as ErrCorrupt, naming truncation when that
// is what happened.
func corrupt(format string, err error) error {
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: %s is truncated", ErrCorrupt, format)
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, format) {
		msg = format + ": " + msg
	}
	return fmt.Errorf("%w: %s", ErrCorrupt, msg)
}

// checkPixels is the decompression-bomb guard, run on header dimensions.
func (t Transform) checkPixels(format string, w, h int) error {
	if int64(w)*int64(h) > int64(t.maxPixels()) {
		return fmt.Errorf("%w: %s is %dx%d, over the limit of %d pixels", ErrTooLarge, format, w, h, t.maxPixels())
	}
	return nil
}

// decode turns img into a raster, refusing oversized images before any pixel
// is decoded.
func (t Transform) decode(img []byte) (raster, error) {
	format, err := sniff(img)
	if err != nil {
		return raster{}, err
	}
	if format == "jpeg" && !t.PureGoJPEG {
		return t.decodeTurbo(img)
	}
	cfg, err := goDecodeConfig(format, img)
	if err != nil {
		return raster{}, err
	}
	if err := t.checkPixels(format, cfg.Width, cfg.Height); err != nil {
		return raster{}, err
	}
	r := bytes.NewReader(img)
	var m image.Image
	switch format {
	case "jpeg":
		m, err = jpeg.Decode(r)
	case "png":
		m, err = png.Decode(r)
	case "gif":
		m, err = gif.Decode(r)
	case "bmp":
		m, err = bmp.Decode(r)
	case "webp":
		m, err = webp.Decode(r)
	}
	if err != nil {
		return raster{}, corrupt(format, err)
	}
	switch m := m.(type) {
	case *image.YCbCr:
		if format == "webp" {
			return webpToRGB(m), nil
		}
	case *image.NYCbCrA:
		return webpToRGB(&m.YCbCr), nil // only WebP has these
	}
	out := fromImage(m, cfg.Width, cfg.Height)
	if format == "jpeg" {
		out = out.orient(jpegOrientation(img))
	}
	return out, nil
}

// fromImage copies a decoded image into a w×h raster, placing it at its
// bounds' offset (a GIF's first frame may cover only part of the canvas;
// the rest stays black). Alpha is dropped without compositing, as PIL's
// convert("RGB") does. Each concrete type the decoders return gets its own
// loop over the raw pixels; only unknown types go through color.Color.
func fromImage(m image.Image, w, h int) raster {
	b := m.Bounds().Intersect(image.Rect(0, 0, w, h))
	c := 3
	switch m.(type) {
	case *image.Gray, *image.Gray16:
		c = 1
	}
	r := newRaster(w, h, c)
	if b != image.Rect(0, 0, w, h) {
		clear(r.pix)
	}
	if b.Empty() {
		return r
	}
	bw := b.Dx()
	var lut *[256][3]byte
	if p, ok := m.(*image.Paletted); ok {
		lut = paletteRGB(p.Palette)
	}
	for y := b.Min.Y; y < b.Max.Y; y++ {
		d := r.pix[(y*w+b.Min.X)*c : (y*w+b.Max.X)*c]
		switch m := m.(type) {
		case *image.Gray:
			copy(d, m.Pix[m.PixOffset(b.Min.X, y):])
		case *image.Gray16:
			s := m.Pix[m.PixOffset(b.Min.X, y):]
			for x := range bw {
				d[x] = s[2*x] // high byte, as PIL's 16-bit unpackers keep
			}
		case *image.RGBA:
			rgbaRow(d, m.Pix[m.PixOffset(b.Min.X, y):], 4, bw)
		case *image.NRGBA:
			rgbaRow(d, m.Pix[m.PixOffset(b.Min.X, y):], 4, bw)
		case *image.RGBA64:
			rgbaRow(d, m.Pix[m.PixOffset(b.Min.X, y):], 8, bw)
		case *image.NRGBA64:
			rgbaRow(d, m.Pix[m.PixOffset(b.Min.X, y):], 8, bw)
		case *image.YCbCr:
			ycbcrRow(d, m, b.Min.X, y, bw)
		case *image.Paletted:
			s := m.Pix[m.PixOffset(b.Min.X, y):]
			for x := range bw {
				p := lut[s[x]]
				d[3*x], d[3*x+1], d[3*x+2] = p[0], p[1], p[2]
			}
		case *image.CMYK:
			// image/jpeg has already undone Adobe's inversion.
			s := m.Pix[m.PixOffset(b.Min.X, y):]
			for x := range bw {
				nk := 255 - int(s[4*x+3])
				for i := range 3 {
					d[3*x+i] = clipByte(nk - mulDiv255(int(s[4*x+i]), nk))
				}
			}
		default:
			for x := range bw {
				cr, cg, cb, _ := color.NRGBAModel.Convert(m.At(b.Min.X+x, y)).RGBA()
				d[3*x], d[3*x+1], d[3*x+2] = byte(cr>>8), byte(cg>>8), byte(cb>>8)
			}
		}
	}
	return r
}

// rgbaRow copies the colour channels of n pixels that are stride bytes apart;
// for 16-bit pixels (stride 8) that is the high byte of each channel.
func rgbaRow(d, s []byte, stride, n int) {
	ch := stride / 4
	s = s[:n*stride]
	for x := range n {
		p := s[x*stride : x*stride+3*ch]
		d[3*x], d[3*x+1], d[3*x+2] = p[0], p[ch], p[2*ch]
	}
}

// ycbcrRow converts with nearest-neighbour chroma, as image/jpeg intends; it
// does not match libjpeg's smoother ("fancy") chroma upsampling or its IDCT,
// which is why the pure-Go JPEG path is further from PIL.
func ycbcrRow(d []byte, m *image.YCbCr, x0, y, n int) {
	yi := m.YOffset(x0, y)
	ys := m.Y[yi : yi+n]
	ci := m.COffset(x0, y)
	var shift uint // log2 of the horizontal chroma subsampling
	switch m.SubsampleRatio {
	case image.YCbCrSubsampleRatio444, image.YCbCrSubsampleRatio440:
		shift = 0
	case image.YCbCrSubsampleRatio422, image.YCbCrSubsampleRatio420:
		shift = 1
	default:
		for x := range n {
			cj := m.COffset(x0+x, y)
			d[3*x], d[3*x+1], d[3*x+2] = color.YCbCrToRGB(ys[x], m.Cb[cj], m.Cr[cj])
		}
		return
	}
	c0 := x0 >> shift
	for x := range n {
		cj := ci + (x0+x)>>shift - c0
		d[3*x], d[3*x+1], d[3*x+2] = color.YCbCrToRGB(ys[x], m.Cb[cj], m.Cr[cj])
	}
}

// paletteRGB resolves a palette once per row rather than once per pixel.
// Indexes past the palette's end are black.
func paletteRGB(p color.Palette) *[256][3]byte {
	var lut [256][3]byte
	for i, c := range p[:min(len(p), 256)] {
		switch c := c.(type) {
		case color.RGBA:
			lut[i] = [3]byte{c.R, c.G, c.B}
		case color.NRGBA:
			lut[i] = [3]byte{c.R, c.G, c.B}
		default:
			n := color.NRGBAModel.Convert(c).(color.NRGBA)
			lut[i] = [3]byte{n.R, n.G, n.B}
		}
	}
	return &lut
}
