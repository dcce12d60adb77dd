package memtrim

import (
	"os"
	"strings"
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

// A process linked against glibc must be seen as one: memtrim's C code once tested
// __GLIBC__ before any C library header had defined it, so every trim was a no-op and
// FreeHeld was always 0.
func TestGlibcSeen(t *testing.T) {
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Skip("no /proc/self/maps:", err)
	}
	linked := strings.Contains(string(maps), "/libc.so.6")
	if linked != Glibc() {
		t.Fatalf("glibc mapped: %v; memtrim.Glibc(): %v", linked, Glibc())
	}
	if !linked {
		return
	}
	if cInUse() == 0 {
		t.Fatal("glibc reports no memory in use: mallinfo2 is not reached")
	}
	Trim()
}
