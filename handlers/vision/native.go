package vision

import "fmt"

// ApplyNative decodes img at its own size, upright, and returns its tensor (CHW, h×w):
// ToTensor, then Normalize where Mean and Std are set. Nothing is resized or cropped, as
// torchvision's detectors take their images (they resize inside the model); Resize, the crop
// and the exact size are ignored. Gray and MaxPixels apply, and the errors are Apply's.
func (t Transform) ApplyNative(img []byte) (dst []float32, h, w int, err error) {
	c := 3
	if t.Gray {
		c = 1
	}
	if t.Mean != nil && len(t.Mean) != c || t.Std != nil && len(t.Std) != c || (t.Mean == nil) != (t.Std == nil) {
		return nil, 0, 0, fmt.Errorf("vision: Mean and Std need %d values each, got %d and %d", c, len(t.Mean), len(t.Std))
	}
	for _, s := range t.Std {
		if s == 0 {
			return nil, 0, 0, fmt.Errorf("vision: Std has a zero")
		}
	}
	format, iw, ih, err := DecodeConfig(img)
	if err != nil {
		return nil, 0, 0, err
	}
	if err := t.checkPixels(format, iw, ih); err != nil {
		return nil, 0, 0, err
	}
	release := decoding.acquire(int64(iw) * int64(ih))
	defer release()
	// No resize: the JPEG is decoded at full size.
	n := t
	n.Resize, n.CropW, n.CropH, n.Width, n.Height = 0, 0, 0, 0, 0
	src, err := n.decode(img)
	if err != nil {
		return nil, 0, 0, err
	}
	defer src.release()
	if t.Gray && src.c == 3 {
		src.toGray()
	}
	h, w = src.h, src.w
	plane := h * w
	lut := t.normLUT(c)
	dst = make([]float32, c*plane)
	p := src.pix
	if src.c == 3 {
		d0, d1, d2 := dst[:plane], dst[plane:2*plane], dst[2*plane:]
		for i := range plane {
			s := p[3*i : 3*i+3 : 3*i+3]
			d0[i], d1[i], d2[i] = lut[0][s[0]], lut[1][s[1]], lut[2][s[2]]
		}
		return dst, h, w, nil
	}
	// One gray channel, written to every output channel (PIL's convert("RGB")).
	for ch := range c {
		d, l := dst[ch*plane:(ch+1)*plane], &lut[ch]
		for i, v := range p[:plane] {
			d[i] = l[v]
		}
	}
	return dst, h, w, nil
}
