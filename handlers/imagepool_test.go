package handlers_test

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"math"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/core/coretest"
	"github.com/torchd/torchd/handlers"
	"github.com/torchd/torchd/handlers/vision"
)

// The image handlers preprocess into pooled tensors, which core gives back (Sample.Release)
// once the worker is done with them. Served concurrently in batches, every request still
// gets its own image's answer: no tensor is reused while a batch reads it (run with -race
// too), and a reused one is written over whole, padding included.
func TestImageTensorsPooledAcrossRequests(t *testing.T) {
	rt := &coretest.Runtime{}
	r := coretest.NewRegistry(t, rt)
	coretest.Add(t, r, "m", coretest.Archive(t, "image_classifier",
		"batch_size = 4\nmax_batch_delay = 2\n[options]\nresize = 24\ncrop_size = 20\n", nil))
	tr := vision.DefaultTransform()
	tr.Resize, tr.CropW, tr.CropH = 24, 20, 20
	// Photos of other sizes and colours, some smaller than the crop (black padding around
	// them), so that a tensor left over from another request would show.
	type photo struct {
		img  []byte
		want []float32
	}
	var photos []photo
	for i, size := range [][2]int{{64, 48}, {30, 40}, {12, 9}, {100, 20}, {16, 16}, {48, 64}} {
		img := gradientJPEG(t, size[0], size[1], uint8(40*i))
		c, h, w := tr.OutputShape()
		want := make([]float32, c*h*w)
		if err := tr.Apply(img, want); err != nil {
			t.Fatal(err)
		}
		photos = append(photos, photo{img, want})
	}
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range 20 {
				p := photos[(g+n)%len(photos)]
				res, err := r.Serve(&core.Request{Model: "m", Raw: true, Decode: func(*core.ModelVersion) (core.Input, error) {
					return core.Input{Payloads: &handlers.Request{Inputs: []handlers.Payload{{Name: "body", ContentType: "image/jpeg", Data: p.img}}}}, nil
				}})
				if err != nil {
					t.Error(err)
					return
				}
				if err := doubled(coretest.Float32s(res.Out[0]), p.want); err != nil {
					t.Errorf("goroutine %d request %d: %v", g, n, err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// doubled checks got is want doubled (the fake model's answer), within float32 rounding.
func doubled(got, want []float32) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d values, want %d", len(got), len(want))
	}
	for i := range got {
		if d := math.Abs(float64(got[i] - 2*want[i])); d > 1e-5 {
			return fmt.Errorf("value %d is %v, want %v: another request's tensor", i, got[i], 2*want[i])
		}
	}
	return nil
}

// gradientJPEG is a w×h JPEG of a diagonal gradient offset by base.
func gradientJPEG(t *testing.T, w, h int, base uint8) []byte {
	t.Helper()
	m := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			m.Set(x, y, color.RGBA{base + uint8(3*x), uint8(5 * y), base ^ uint8(x+y), 255})
		}
	}
	var b bytes.Buffer
	if err := jpeg.Encode(&b, m, &jpeg.Options{Quality: 90}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// BenchmarkImageTensorPool is an image handler's Preprocess of a small JPEG (so that the
// tensor's cost shows beside the decode's), 25 requests a CPU at once as a server at c=50
// runs them, each sample given back to the pool (pooled) or left to the garbage collector
// (fresh: a new 600 KB tensor a request, as before the pool); cpu-ns/op is the process's CPU
// time a request.
//
//	go test -run='^$' -bench=ImageTensorPool -benchtime=2s ./handlers/
func BenchmarkImageTensorPool(b *testing.B) {
	h, err := handlers.New("image_classifier", handlers.Context{})
	if err != nil {
		b.Fatal(err)
	}
	var img bytes.Buffer
	m := image.NewRGBA(image.Rect(0, 0, 256, 256))
	for i := range m.Pix {
		m.Pix[i] = byte(i * 7)
	}
	if err := jpeg.Encode(&img, m, &jpeg.Options{Quality: 90}); err != nil {
		b.Fatal(err)
	}
	for _, mode := range []string{"pooled", "fresh"} {
		b.Run(mode, func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(25)
			start := processCPU()
			b.RunParallel(func(pb *testing.PB) {
				req := &handlers.Request{Inputs: []handlers.Payload{{Name: "body", ContentType: "image/jpeg", Data: img.Bytes()}}}
				for pb.Next() {
					s, err := h.Preprocess(req)
					if err != nil {
						b.Error(err)
						return
					}
					if mode == "pooled" {
						s.Release()
					}
				}
			})
			b.ReportMetric(float64(processCPU()-start)/float64(b.N), "cpu-ns/op")
		})
	}
}

// processCPU is the process's user and system time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
