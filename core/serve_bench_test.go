package core_test

import (
	"testing"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/core/coretest"
	"github.com/torchd/torchd/handlers"
)

// echoRuntime loads models whose Run answers each sample's tensors as they came: a forward
// that costs nothing, so that a benchmark of Registry.Serve measures the request path alone
// (admission, the window, the batcher, the hand-off to a worker and back, the metrics and
// statistics). coretest's model records every input, which a benchmark must not.
type echoRuntime struct{}

type echoModel struct{}

func (echoRuntime) Name() string                              { return "echo" }
func (echoRuntime) Accepts(*archive.Model) bool               { return true }
func (echoRuntime) Load(core.LoadRequest) (core.Model, error) { return echoModel{}, nil }

func (echoModel) Kind() string   { return "echo" }
func (echoModel) Device() string { return "cpu" }
func (echoModel) Close() error   { return nil }
func (echoModel) Run(batch []*handlers.Sample, _ *handlers.Stage) ([][]handlers.Tensor, error) {
	outs := make([][]handlers.Tensor, len(batch))
	for i, s := range batch {
		outs[i] = s.Tensors
	}
	return outs, nil
}

// benchServe serves raw tensor requests of one row through a version with config's settings,
// from one goroutine or (parallel) from GOMAXPROCS×par goroutines.
func benchServe(b *testing.B, config string, par int) {
	r := coretest.NewRegistryOf(b, echoRuntime{})
	coretest.Add(b, r, "m", coretest.Archive(b, "tensor", config+coretest.XConfig, nil))
	sample := &handlers.Sample{Items: 1, Tensors: []handlers.Tensor{coretest.Floats([]int64{1, 2}, 1, 2)}}
	decode := func(*core.ModelVersion) (core.Input, error) { return core.Input{Sample: sample}, nil }
	serve := func() {
		res, err := r.Serve(&core.Request{Model: "m", Raw: true, Decode: decode})
		if err != nil || len(res.Out) != 1 {
			b.Fatalf("serve: %v, %d outputs", err, len(res.Out))
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	if par == 0 {
		for range b.N {
			serve()
		}
		return
	}
	b.SetParallelism(par)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			serve()
		}
	})
}

// BenchmarkServe is the request path's cost with a forward that costs nothing: one client
// (each request meets an idle worker), and eight a core (requests meet busy workers and
// queue; batches of one, as ONNX MNIST's fixed shape has, or of up to eight).
func BenchmarkServe(b *testing.B) {
	b.Run("serial", func(b *testing.B) { benchServe(b, "batch_size = 1\nmin_workers = 1\n", 0) })
	b.Run("c8/batch1/workers2", func(b *testing.B) { benchServe(b, "batch_size = 1\nmin_workers = 2\n", 8) })
	b.Run("c8/batch8/workers1", func(b *testing.B) {
		benchServe(b, "batch_size = 8\nmax_batch_delay = 1\nmin_workers = 1\n", 8)
	})
}
