package handlers_test

import (
	"runtime"
	"testing"

	"github.com/torchd/torchd/handlers"
	"github.com/torchd/torchd/torch"
)

// BenchmarkInferBatch runs digits batches of 16, 64, 32 and 64 one-image requests through the
// default concatenate → forward → split, as a worker does: with the worker's own stage, and
// with a stage lent for each call (warm-up's and the tuner's way); and each with a garbage
// collection between batches, as a server's request garbage brings, which empties a sync.Pool.
// allocs/op and B/op are per batch; they do not depend on the machine's load, the timings do.
func BenchmarkInferBatch(b *testing.B) {
	h, m := zooHandler(b, "tensor", "digits", "digits_tensor")
	var batches [][]*handlers.Sample
	for _, n := range []int{16, 64, 32, 64} {
		var batch []*handlers.Sample
		for i := range n {
			batch = append(batch, digitsSample(i, 1))
		}
		batches = append(batches, batch)
	}
	run := func(b *testing.B, gc bool, infer func([]*handlers.Sample) error) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if gc {
				b.StopTimer()
				runtime.GC()
				b.StartTimer()
			}
			if err := infer(batches[i%len(batches)]); err != nil {
				b.Fatal(err)
			}
			i++
		}
	}
	for _, gc := range []bool{false, true} {
		name := ""
		if gc {
			name = ", GC between batches"
		}
		b.Run("worker stage"+name, func(b *testing.B) {
			st := handlers.NewStage(false, 64)
			defer st.Close()
			run(b, gc, func(batch []*handlers.Sample) error {
				_, err := handlers.InferStaged(h, m, batch, st)
				return err
			})
		})
		b.Run("lent"+name, func(b *testing.B) {
			run(b, gc, func(batch []*handlers.Sample) error {
				_, err := handlers.Infer(h, m, batch)
				return err
			})
		})
	}
}

// BenchmarkStackImages is the copy a worker makes of a batch of 32 preprocessed 224×224
// images into its staging buffer: what writing each image straight into the batch's buffer
// would save, next to the image's decode and resize (handlers/vision BenchmarkPreprocess).
func BenchmarkStackImages(b *testing.B) {
	const n = 32
	batch := make([]*handlers.Sample, n)
	for i := range batch {
		batch[i] = &handlers.Sample{Items: 1, Tensors: []handlers.Tensor{{DType: torch.Float32, Shape: []int64{1, 3, 224, 224}, Data: make([]byte, 3*224*224*4)}}}
	}
	s := handlers.NewStage(false, n)
	defer s.Close()
	b.SetBytes(n * 3 * 224 * 224 * 4)
	for b.Loop() {
		if _, _, err := s.Stack(batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/image")
}
