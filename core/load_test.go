package core

import (
	"strings"
	"testing"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/handlers"
)

// A declared shape whose dimensions are each in range and whose product is not is an error,
// not a makeslice panic (or tens of gigabytes of zeros) when the warm-up sample is built.
// Archive configs are refused as they are read; this is the load's own check.
func TestWarmupSamplesBounded(t *testing.T) {
	for _, shape := range [][]int64{{-1, 100000, 100000, 100000}, {-1, 10000, 1000, 1000}} {
		ac := archive.ModelConfig{Handler: "tensor", Inputs: []archive.TensorSpec{{Name: "x", DType: "float32", Shape: shape}}}
		h, err := handlers.New("tensor", handlers.Context{Config: ac})
		if err != nil {
			t.Fatal(err)
		}
		if s, err := warmupSamples(h, ac); err == nil || !strings.Contains(err.Error(), `input "x"`) {
			t.Errorf("%v: %d samples, %v; want an error naming the input", shape, len(s), err)
		}
	}
	ac := archive.ModelConfig{Handler: "tensor", Inputs: []archive.TensorSpec{{Name: "x", DType: "float32", Shape: []int64{-1, 3, 4}}}}
	h, _ := handlers.New("tensor", handlers.Context{Config: ac})
	s, err := warmupSamples(h, ac)
	if err != nil || len(s) != 3 || len(s[0].Tensors[0].Data) != 3*4*4 {
		t.Fatalf("[-1 3 4]: %v, %v", s, err)
	}
}
