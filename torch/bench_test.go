package torch_test

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"testing"

	"github.com/torchd/torchd/torch"
)

// BenchmarkResNet18Forward measures forward throughput at batch 1 and 32 with 2 intra-op
// threads (TORCHD_BENCH_THREADS) on a locked OS thread, as a daemon worker runs it. testdata/bench_python.py
// measures the same forward from /usr/bin/python3; `make bench-binding` runs both.
func BenchmarkResNet18Forward(b *testing.B) {
	defer lockBenchThread()()
	m, err := torch.Load(zoo(b, "resnet18", "model.pt"))
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	benchImages(b, m)
}

// benchImages runs benchForward on images [N, 3, 224, 224] at batch 1 and 32, with img/s.
func benchImages(b *testing.B, m forwarder) {
	for _, bs := range []int{1, 32} {
		b.Run(fmt.Sprintf("batch%d", bs), func(b *testing.B) {
			benchForward(b, m, int64(bs), 3, 224, 224)
			b.ReportMetric(float64(b.N*bs)/b.Elapsed().Seconds(), "img/s")
		})
	}
}

// BenchmarkPackageForward measures a zoo image package's forward (TORCHD_BENCH_PACKAGE, a
// model.pt2 of models/out; default resnet18's model_int8.pt2) at batch 1 and 32 on a locked
// thread with TORCHD_BENCH_THREADS intra-op threads, freed memory kept as the daemon keeps
// it: the binding's forward alone, beside PyTorch's aoti_load_package of the same file
// (bench/engine_spike.py's torch-pt2 rows).
func BenchmarkPackageForward(b *testing.B) {
	defer lockBenchThread()()
	torch.KeepFreedMemory()
	path := os.Getenv("TORCHD_BENCH_PACKAGE")
	if path == "" {
		path = zoo(b, "resnet18", "model_int8.pt2")
	}
	p, err := torch.LoadPackage(path)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	benchImages(b, p)
}

// BenchmarkOptimizeForInference compares a zoo model's forward as loaded with
// torch.jit.optimize_for_inference (WithOptimize) and without, on one locked thread with
// TORCHD_BENCH_THREADS intra-op threads (default 2). Each plain run is followed by its
// optimized twin; -count repeats a sub-benchmark back to back, so for pairs that share the
// machine's moment repeat the whole command (-count 1) instead.
func BenchmarkOptimizeForInference(b *testing.B) {
	defer lockBenchThread()()
	for _, c := range []struct {
		model string
		shape []int64
		batch []int
	}{{"resnet18", []int64{3, 224, 224}, []int{1, 8}}, {"digits", []int64{1, 28, 28}, []int{1, 32}}} {
		for _, bs := range c.batch {
			for _, opt := range []bool{false, true} {
				name := fmt.Sprintf("%s/batch%d/plain", c.model, bs)
				var opts []torch.LoadOption
				if opt {
					name, opts = fmt.Sprintf("%s/batch%d/optimized", c.model, bs), []torch.LoadOption{torch.WithOptimize()}
				}
				b.Run(name, func(b *testing.B) {
					m, err := torch.Load(zoo(b, c.model, "model.pt"), opts...)
					if err != nil {
						b.Fatal(err)
					}
					defer m.Close()
					benchForward(b, m, append([]int64{int64(bs)}, c.shape...)...)
				})
			}
		}
	}
}

// forwarder is a TorchScript module or a package.
type forwarder interface {
	Forward(args ...any) (any, error)
}

// benchForward times m's forward on a deterministic input of the given shape, after three
// untimed runs in which the profiling executor settles on it.
func benchForward(b *testing.B, m forwarder, shape ...int64) {
	n := 1
	for _, d := range shape {
		n *= int(d)
	}
	data := make([]float32, n)
	for i := range data {
		data[i] = float32(i%255)/255 - 0.5
	}
	x, err := torch.NewTensor(data, shape...)
	if err != nil {
		b.Fatal(err)
	}
	defer x.Close()
	for range 3 {
		out, err := m.Forward(x)
		if err != nil {
			b.Fatal(err)
		}
		torch.CloseValue(out)
	}
	b.ResetTimer()
	for b.Loop() {
		out, err := m.Forward(x)
		if err != nil {
			b.Fatal(err)
		}
		torch.CloseValue(out)
	}
}

// lockBenchThread locks the goroutine to its OS thread, as a daemon worker's is, and sets
// LibTorch's intra-op threads to TORCHD_BENCH_THREADS (default 2); the result unlocks.
func lockBenchThread() (unlock func()) {
	runtime.LockOSThread()
	threads := 2
	if n, err := strconv.Atoi(os.Getenv("TORCHD_BENCH_THREADS")); err == nil && n > 0 {
		threads = n
	}
	torch.SetNumThreads(threads)
	return runtime.UnlockOSThread
}
