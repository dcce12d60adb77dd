package core

import (
	"slices"
	"testing"
)

// The row counts a version's forwards run most often: a full batch's and each preferred
// size's forwards, split at the forward batch.
func TestForwardRows(t *testing.T) {
	for _, c := range []struct {
		batch, forward int
		preferred      []int
		auto           bool
		want           []int
	}{
		{batch: 1, want: nil},
		{batch: 32, want: []int{32}},
		{batch: 32, forward: 8, want: []int{8}},
		{batch: 32, forward: 64, want: []int{32}},
		{batch: 32, forward: 8, preferred: []int{4, 12, 16}, want: []int{4, 8}},
		{batch: 10, forward: 4, preferred: []int{6, 16}, want: []int{2, 4}},
		{batch: 32, preferred: []int{8, 16}, want: []int{8, 16, 32}},
		{batch: 32, forward: 8, auto: true, want: nil},
		// A config listing many sizes gets models for the largest few only.
		{batch: 1000, preferred: []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, want: []int{8, 9, 10, 1000}},
	} {
		s := ModelSettings{BatchSize: c.batch, ForwardBatch: c.forward, PreferredBatchSize: c.preferred}
		s.Auto.ForwardBatch = c.auto
		if got := ForwardRows(s); !slices.Equal(got, c.want) {
			t.Errorf("%+v: %v, want %v", c, got, c.want)
		}
	}
}
