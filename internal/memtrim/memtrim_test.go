package memtrim

import (
	"sync"
	"testing"
)

// Trim empties sync.Pools (the image buffer pools among them), which otherwise keep their
// contents through one collection in their victim caches, and an idle server collects
// rarely.
func TestTrimEmptiesPools(t *testing.T) {
	var p sync.Pool
	for range 4 {
		b := make([]byte, 1<<20)
		p.Put(&b)
	}
	Trim()
	if b := p.Get(); b != nil {
		t.Fatal("a pooled buffer survived Trim")
	}
}
