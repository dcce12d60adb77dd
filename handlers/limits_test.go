package handlers_test

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"strings"
	"testing"

	"github.com/torchd/torchd/errkind"

	"github.com/torchd/torchd/handlers"
)

// A request whose client goes away stops decoding at the next image: the rest of the
// request's images are never decoded.
func TestImageSampleCanceledBetweenImages(t *testing.T) {
	h, _ := zooHandler(t, "image_classifier", "digits", "digits")
	pngs := digitPNGs(t, 8)
	req := &handlers.Request{}
	for _, p := range pngs {
		req.Inputs = append(req.Inputs, handlers.Payload{Name: "data", ContentType: "image/png", Data: p})
	}
	checks := 0
	req.Canceled = func() bool { checks++; return checks > 3 }
	if _, err := h.Preprocess(req); !errors.Is(err, handlers.ErrCanceled) {
		t.Fatalf("Preprocess with the client gone: %v, want ErrCanceled", err)
	}
	if checks != 4 {
		t.Fatalf("checked %d times, want 4: three images decoded, the fourth check stops", checks)
	}
	req.Canceled = func() bool { return false }
	if s, err := h.Preprocess(req); err != nil || s.Items != len(pngs) {
		t.Fatalf("Preprocess with the client there: %v", err)
	}
}

// max_request_pixels bounds the pixels of one request's images, summed from their headers
// before anything is decoded, and answers 400 as max_pixels does for one image.
func TestImageRequestPixelBudget(t *testing.T) {
	h, _ := zooHandler(t, "image_classifier", "digits", "digits")
	req := &handlers.Request{}
	// 12 headers of 36 Mpx: each under max_pixels (40 M), together over the 400 M default.
	for range 12 {
		req.Inputs = append(req.Inputs, handlers.Payload{Name: "data", ContentType: "image/png", Data: pngHeader(6000, 6000)})
	}
	_, err := h.Preprocess(req)
	if !errors.Is(err, errkind.BadInput) || !strings.Contains(err.Error(), "max_request_pixels") || !strings.Contains(err.Error(), "432000000 pixels") {
		t.Fatalf("12 images of 36 Mpx: %v, want a 400 naming max_request_pixels", err)
	}
}

// pngHeader is a PNG whose header declares w×h RGB and whose data is a few bytes: enough
// for the header checks, refused if decoded.
func pngHeader(w, h uint32) []byte {
	chunk := func(typ string, data []byte) []byte {
		b := binary.BigEndian.AppendUint32(nil, uint32(len(data)))
		b = append(b, typ...)
		b = append(b, data...)
		return binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(append([]byte(typ), data...)))
	}
	ihdr := binary.BigEndian.AppendUint32(nil, w)
	ihdr = binary.BigEndian.AppendUint32(ihdr, h)
	ihdr = append(ihdr, 8, 2, 0, 0, 0)
	b := []byte("\x89PNG\r\n\x1a\n")
	b = append(b, chunk("IHDR", ihdr)...)
	b = append(b, chunk("IDAT", []byte{0x78, 0x9c, 0x63, 0, 0, 0, 1, 0, 1})...)
	return append(b, chunk("IEND", nil)...)
}

// An image over max_pixels after many that fit is refused before any of them is decoded:
// it cannot be used to skip the request's budget.
func TestImageOverMaxPixelsRefusedFirst(t *testing.T) {
	h, _ := zooHandler(t, "image_classifier", "digits", "digits")
	req := &handlers.Request{}
	for range 3 {
		req.Inputs = append(req.Inputs, handlers.Payload{Name: "data", ContentType: "image/png", Data: pngHeader(6000, 6000)})
	}
	req.Inputs = append(req.Inputs, handlers.Payload{Name: "data", ContentType: "image/png", Data: pngHeader(50000, 50000)})
	_, err := h.Preprocess(req)
	if !errors.Is(err, errkind.BadInput) || !strings.Contains(err.Error(), "image 3: ") || !strings.Contains(err.Error(), "over the limit") {
		t.Fatalf("%v, want image 3's max_pixels error", err)
	}
}
