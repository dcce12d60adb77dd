package handlers_test

import (
	"encoding/binary"
	"math"
	"path/filepath"
	"testing"

	"github.com/torchd/torchd/handlers"
	"github.com/torchd/torchd/internal/tolerance"
	"github.com/torchd/torchd/torch"
)

// A batch of more rows than a package's exported maximum (16 samples of 5 rows, against
// digits' 64) runs in parts, and every sample gets the output it gets alone.
func TestInferSplitsBatchesOverThePackageMax(t *testing.T) {
	h, _ := zooHandler(t, "tensor", "digits", "digits_tensor")
	p, err := torch.LoadPackage(filepath.Join("..", "models", "out", "digits", "model.pt2"))
	if err != nil {
		t.Fatalf("%v: run `make models` first", err)
	}
	t.Cleanup(func() { p.Close() })
	const rows, n = 5, 16
	batch := make([]*handlers.Sample, n)
	for i := range batch {
		data := make([]byte, 4*rows*784)
		for k := 0; k < len(data); k += 4 {
			binary.LittleEndian.PutUint32(data[k:], math.Float32bits(float32((i*7+k/4)%255)/255))
		}
		batch[i] = &handlers.Sample{Items: rows, Tensors: []handlers.Tensor{{DType: torch.Float32, Shape: []int64{rows, 1, 28, 28}, Data: data}}}
	}
	got, err := handlers.Infer(h, p, batch)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != n {
		t.Fatalf("%d results for %d samples", len(got), n)
	}
	for i, s := range batch {
		alone, err := handlers.Infer(h, p, []*handlers.Sample{s})
		if err != nil {
			t.Fatal(err)
		}
		a, b := logits(alone[0][0]), logits(got[i][0])
		if len(a) != rows*10 || len(b) != len(a) {
			t.Fatalf("sample %d: %d and %d logits, want %d", i, len(b), len(a), rows*10)
		}
		for k := range a {
			if math.Abs(float64(a[k]-b[k])) > tolerance.Kernels {
				t.Fatalf("sample %d: logit %d is %v in the batch, %v alone", i, k, b[k], a[k])
			}
		}
	}
	// One sample over the maximum is the package's error, not a crash.
	big := &handlers.Sample{Items: 65, Tensors: []handlers.Tensor{{DType: torch.Float32, Shape: []int64{65, 1, 28, 28}, Data: make([]byte, 4*65*784)}}}
	if _, err := handlers.Infer(h, p, []*handlers.Sample{big}); err == nil {
		t.Fatal("a sample of 65 rows ran on a package exported for at most 64")
	}
}
