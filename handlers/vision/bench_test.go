package vision

import (
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"
)

// cpuTime is the process's user and system time. The benchmarks report it per operation
// (cpu-ns/op) next to ns/op because the machines they run on are shared: a busy neighbour
// stretches the wall-clock time of each operation far more than its CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
}

// BenchmarkPreprocess times Apply with TorchServe's default transform on
// JPEGs (quality 90) made in memory, with each decoder; turbojpeg is the
// default, exact path, turbojpeg-dct opts into DCT-domain downscaling, to show
// what that saves.
//
//	go test -run='^$' -bench='Preprocess|Resample' -benchtime=2s -count=3 ./handlers/vision/
func BenchmarkPreprocess(b *testing.B) {
	for _, dec := range []string{"turbojpeg", "turbojpeg-libjpeghuff", "turbojpeg-dct", "gojpeg"} {
		for _, size := range [][2]int{{640, 480}, {1920, 1080}} {
			b.Run(fmt.Sprintf("%s/%dx%d", dec, size[0], size[1]), func(b *testing.B) {
				defer func(old bool) { fastHuffman = old }(fastHuffman)
				fastHuffman = dec != "turbojpeg-libjpeghuff"
				img := encodeJPEG(b, size[0], size[1])
				t := DefaultTransform()
				t.PureGoJPEG = dec == "gojpeg"
				t.JPEGDCTScaling = dec == "turbojpeg-dct"
				c, h, w := t.OutputShape()
				dst := make([]float32, c*h*w)
				b.ReportAllocs()
				b.SetBytes(int64(len(img)))
				start := cpuTime()
				for b.Loop() {
					if err := t.Apply(img, dst); err != nil {
						b.Fatal(err)
					}
				}
				reportCPU(b, start)
			})
		}
	}
}

// BenchmarkDecodeJPEG times libjpeg-turbo's decode alone, into the raster the
// resize reads, exact (the default) and with DCT scaling, so that Preprocess's
// time splits into decoding and resampling (BenchmarkResampleFrom).
//
//	go test -run='^$' -bench='DecodeJPEG|ResampleFrom|Preprocess/turbo' -benchtime=2s -count=3 ./handlers/vision/
func BenchmarkDecodeJPEG(b *testing.B) {
	for _, dec := range []string{"exact", "dct"} {
		for _, size := range [][2]int{{640, 480}, {1920, 1080}} {
			b.Run(fmt.Sprintf("%s/%dx%d", dec, size[0], size[1]), func(b *testing.B) {
				img := encodeJPEG(b, size[0], size[1])
				t := DefaultTransform()
				t.JPEGDCTScaling = dec == "dct"
				b.ReportAllocs()
				start := cpuTime()
				for b.Loop() {
					r, err := t.decodeTurbo(img)
					if err != nil {
						b.Fatal(err)
					}
					r.release()
				}
				reportCPU(b, start)
			})
		}
	}
}

// BenchmarkResampleFrom times the resize, crop and normalization alone from a
// decoded image of each size, the part of Preprocess that is not decoding, with the
// horizontal pass's best code for this CPU and with each lesser one (isa0: any CPU,
// isa1: SSE4.1, isa2: AVX2).
func BenchmarkResampleFrom(b *testing.B) {
	for _, isa := range []int{-1, 0, 1, 2} {
		for _, size := range [][2]int{{640, 480}, {1920, 1080}} {
			name := fmt.Sprintf("%dx%d", size[0], size[1])
			if isa >= 0 {
				if visISA(isa) != isa {
					continue
				}
				name = fmt.Sprintf("isa%d/%s", isa, name)
			}
			b.Run(name, func(b *testing.B) {
				defer func(old int) { resampleISA = old }(resampleISA)
				resampleISA = isa
				r := newRaster(size[0], size[1], 3)
				defer r.release()
				for i := range r.pix {
					r.pix[i] = byte(i * 7)
				}
				t := DefaultTransform()
				dst := make([]float32, 3*224*224)
				b.ReportAllocs()
				start := cpuTime()
				for b.Loop() {
					t.resampleInto(&r, dst)
				}
				reportCPU(b, start)
			})
		}
	}
}

// BenchmarkResample times the resize, crop and normalization alone, on a
// decoded 640x480 image.
func BenchmarkResample(b *testing.B) {
	r := newRaster(640, 480, 3)
	defer r.release()
	for i := range r.pix {
		r.pix[i] = byte(i * 7)
	}
	t := DefaultTransform()
	dst := make([]float32, 3*224*224)
	b.ReportAllocs()
	start := cpuTime()
	for b.Loop() {
		t.resampleInto(&r, dst)
	}
	reportCPU(b, start)
}

// BenchmarkPreprocessParallel is BenchmarkPreprocess/turbojpeg/1920x1080 as a server runs
// it at c=50: 25 goroutines a CPU preprocessing at once, in one pass (onepass, the default
// for an upright JPEG) and decoded into a raster first (raster), and with DCT scaling.
//
//	go test -run='^$' -bench='PreprocessParallel' -benchtime=2s ./handlers/vision/
func BenchmarkPreprocessParallel(b *testing.B) {
	for _, mode := range []string{"onepass", "raster", "dct"} {
		b.Run(mode, func(b *testing.B) {
			defer func(old bool) { onePassJPEG = old }(onePassJPEG)
			onePassJPEG = mode != "raster"
			img := encodeJPEG(b, 1920, 1080)
			t := DefaultTransform()
			t.JPEGDCTScaling = mode == "dct"
			c, h, w := t.OutputShape()
			b.ReportAllocs()
			b.SetParallelism(25)
			start := cpuTime()
			b.RunParallel(func(pb *testing.PB) {
				dst := make([]float32, c*h*w)
				for pb.Next() {
					if err := t.Apply(img, dst); err != nil {
						b.Error(err)
						return
					}
				}
			})
			reportCPU(b, start)
		})
	}
}

// BenchmarkPreprocessPhoto is BenchmarkPreprocess/turbojpeg on the zoo's 1920x1080 photo (what
// bench/served-ab.sh sends), with jpeghuff.c's Huffman decoder (fast) and libjpeg's (libjpeg).
//
//	go test -run='^$' -bench='PreprocessPhoto' -benchtime=3s -count=5 ./handlers/vision/
func BenchmarkPreprocessPhoto(b *testing.B) {
	img, err := os.ReadFile("../../models/out/resnet18/sample_1920x1080.jpg")
	if err != nil {
		b.Skip("no zoo photo (make models):", err)
	}
	for _, huff := range []string{"fast", "libjpeg"} {
		b.Run(huff, func(b *testing.B) {
			defer func(old bool) { fastHuffman = old }(fastHuffman)
			fastHuffman = huff == "fast"
			t := DefaultTransform()
			c, h, w := t.OutputShape()
			dst := make([]float32, c*h*w)
			b.ReportAllocs()
			start := cpuTime()
			for b.Loop() {
				if err := t.Apply(img, dst); err != nil {
					b.Fatal(err)
				}
			}
			reportCPU(b, start)
		})
	}
}
