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
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	threads := 2
	if n, err := strconv.Atoi(os.Getenv("TORCHD_BENCH_THREADS")); err == nil && n > 0 {
		threads = n
	}
	torch.SetNumThreads(threads)
	m, err := torch.Load(zoo(b, "resnet18", "model.pt"))
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	for _, bs := range []int{1, 32} {
		b.Run(fmt.Sprintf("batch%d", bs), func(b *testing.B) {
			data := make([]float32, bs*3*224*224)
			for i := range data {
				data[i] = float32(i%255)/255 - 0.5
			}
			x, _ := torch.NewTensor(data, int64(bs), 3, 224, 224)
			for range 3 { // the profiling executor settles on this shape
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
			b.ReportMetric(float64(b.N*bs)/b.Elapsed().Seconds(), "img/s")
		})
	}
}
