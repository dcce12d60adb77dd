package core

import (
	"testing"
	"unsafe"
)

// Consecutive places get adjoining rows of one slab; the next slab begins at the place past
// its end; a row of another size is not lent; and a slab's memory goes back to the pool once
// all its places are resolved and its rows given back, not before.
func TestWindowRowsAdjoinAndRecycle(t *testing.T) {
	w := &inputWindow{push: func(*job) {}}
	w.setLimit(8)
	w.setRows(3)
	var places []uint64
	for range 4 {
		n, ok := w.tryEnter()
		if !ok {
			t.Fatal("no place in a window of 8")
		}
		places = append(places, n)
	}
	var rows [][]byte
	var slabs []*slab
	for _, n := range places[:3] {
		mem, s := w.row(n, 8)
		if mem == nil || len(mem) != 8 {
			t.Fatalf("place %d: row %d bytes, want 8", n, len(mem))
		}
		rows, slabs = append(rows, mem), append(slabs, s)
	}
	for i := 1; i < 3; i++ {
		if slabs[i] != slabs[0] || unsafe.SliceData(rows[i]) != &rows[i-1][:cap(rows[i-1])][8] {
			t.Fatalf("place %d's row does not follow place %d's in one slab", i, i-1)
		}
	}
	if mem, s := w.row(places[3], 8); mem == nil || s == slabs[0] {
		t.Fatalf("place 3 (past a slab of 3): row %v in slab %p, want one in a new slab", mem != nil, s)
	}
	if mem, s := w.row(places[3], 16); mem != nil || s != nil {
		t.Fatal("a row of 16 bytes lent from a slab of rows of 8")
	}

	for _, n := range places[:3] {
		w.resolve(n, nil)
	}
	if got := w.recycled.Load(); got != 0 {
		t.Fatalf("%d slabs recycled while their rows are lent", got)
	}
	w.giveRow(slabs[0])
	w.giveRow(slabs[0])
	if got := w.recycled.Load(); got != 0 {
		t.Fatalf("%d slabs recycled with a row still lent", got)
	}
	w.giveRow(slabs[0])
	if got := w.recycled.Load(); got != 1 {
		t.Fatalf("%d slabs recycled, want 1: all its places resolved and rows given back", got)
	}
}

// A batch size of one has no slabs: a lone request runs on its own memory anyway.
func TestWindowRowsNoneForBatchesOfOne(t *testing.T) {
	w := &inputWindow{push: func(*job) {}}
	w.setLimit(4)
	w.setRows(1)
	n, _ := w.tryEnter()
	if mem, _ := w.row(n, 8); mem != nil {
		t.Fatal("a row lent for batches of one")
	}
}

// An idle model drops the memory of the slab new places go to, unless a row of it is lent;
// that slab's remaining places get no rows, and the next place begins a new slab.
func TestWindowRowsReleasedWhenIdle(t *testing.T) {
	w := &inputWindow{push: func(*job) {}}
	w.setLimit(8)
	w.setRows(4)
	a, _ := w.tryEnter()
	b, _ := w.tryEnter()
	if w.holdsSlab() {
		t.Fatal("a slab holds memory before any row was asked of it")
	}
	_, s := w.row(a, 8)
	if !w.holdsSlab() {
		t.Fatal("a slab with a row lent holds no memory")
	}
	w.releaseIdle()
	if !w.holdsSlab() {
		t.Fatal("the idle release dropped a slab with a row lent")
	}
	w.giveRow(s)
	w.releaseIdle()
	if w.holdsSlab() {
		t.Fatal("the idle release kept a slab with no row lent")
	}
	if mem, _ := w.row(b, 8); mem != nil {
		t.Fatal("a row lent from a released slab")
	}
	c, _ := w.tryEnter()
	if mem, s2 := w.row(c, 8); mem == nil || s2 == s {
		t.Fatal("the place after an idle release got no row of a new slab")
	}
}
