package handlers

import (
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"

	"github.com/torchd/torchd/torch"
)

// topK picks what a stable sort of every class, largest first, puts first: the same
// classes in the same order, ties (many here) by their index, for every k.
func TestTopKIsTheStableSortsHead(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{1, 7, 1000} {
		for _, levels := range []int{3, 50, 1 << 30} {
			probs := make([]float64, n)
			for i := range probs {
				probs[i] = float64(rng.IntN(levels)) / float64(levels)
			}
			want := make([]int, n)
			for i := range want {
				want[i] = i
			}
			sort.SliceStable(want, func(a, c int) bool { return probs[want[a]] > probs[want[c]] })
			for _, k := range []int{1, 2, 5, 32, 33, n, n + 5} {
				if got := topK(probs, k); !slices.Equal(got, want[:min(k, n)]) {
					t.Errorf("n %d, %d levels, k %d: %v, want %v", n, levels, k, got, want[:min(k, n)])
				}
			}
		}
	}
	// A model that answers NaN gets its first k classes, as the sort gives them.
	nan := []float64{math.NaN(), math.NaN(), math.NaN()}
	if got := topK(nan, 2); !slices.Equal(got, []int{0, 1}) {
		t.Errorf("NaN probabilities: %v, want [0 1]", got)
	}
}

// BenchmarkTopKResponse is a classifier's postprocessing of one image's 1000 logits, top 5.
//
//	go test -run='^$' -bench=TopKResponse -benchmem ./handlers/
func BenchmarkTopKResponse(b *testing.B) {
	rng := rand.New(rand.NewPCG(5, 6))
	logits := make([]float32, 1000)
	for i := range logits {
		logits[i] = float32(rng.NormFloat64() * 3)
	}
	out := []Tensor{{DType: torch.Float32, Shape: []int64{1, 1000}, Data: float32Bytes(logits)}}
	s := &Sample{Items: 1}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := topKResponse("bench", s, out, 5, nil); err != nil {
			b.Fatal(err)
		}
	}
}
