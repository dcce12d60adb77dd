package core

import (
	"testing"
	"time"
)

// The latency histogram counts each answered request once, in the first bucket whose bound
// holds it, and its counts are cumulative with the total last.
func TestLatencyHistogram(t *testing.T) {
	s := newVersionStats()
	for i := range 100 {
		s.answered(nil, time.Duration(i+1)*100*time.Microsecond, Result{}) // 0.1 … 10 ms
	}
	s.answered(ErrQueueFull, time.Minute, Result{}) // past the last bound: +Inf
	c := s.latencyCounts()
	if len(c) != len(LatencyBuckets)+1 || c[len(c)-1] != 101 {
		t.Fatalf("counts %v, want %d buckets and 101 in all", c, len(LatencyBuckets)+1)
	}
	for i, le := range LatencyBuckets {
		want := uint64(min(max(int(le*1e4+1e-9), 0), 100)) // requests of at most le seconds
		if c[i] != want {
			t.Errorf("le %v: %d, want %d", le, c[i], want)
		}
	}
}
