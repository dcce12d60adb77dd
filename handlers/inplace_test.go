package handlers

import (
	"bytes"
	"testing"
	"unsafe"

	"github.com/torchd/torchd/torch"
)

// rowsOf returns samples of one float32 row of two each, cut from one buffer in order, as
// core lends them (Request.Row): each row's capacity runs on to the buffer's end.
func rowsOf(buf []byte, n int) []*Sample {
	var out []*Sample
	for i := range n {
		out = append(out, &Sample{Items: 1, Tensors: []Tensor{{DType: torch.Float32, Shape: []int64{1, 2}, Data: buf[8*i : 8*i+8]}}})
	}
	return out
}

// A batch whose samples lie one after another in one buffer runs there: Stack and stackRows
// hand back that memory, and copy nothing. Out of order, in separate buffers, or for a GPU
// (page-locked memory), the batch is copied, and its bytes are the same.
func TestStackInPlace(t *testing.T) {
	buf := make([]byte, 64)
	for i := range buf {
		buf[i] = byte(i)
	}
	batch := rowsOf(buf, 4)

	st := NewStage(false, 4)
	views, total, err := st.Stack(batch)
	if err != nil || total != 4 {
		t.Fatalf("Stack: %v, %d rows", err, total)
	}
	if unsafe.SliceData(views[0]) != &buf[0] || len(views[0]) != 32 || st.InPlace() != 1 || st.Held() {
		t.Fatalf("Stack of adjoining rows: in place %d, buffer held %v, want the rows' own memory", st.InPlace(), st.Held())
	}
	stacked, rows, err := st.stackRows(batch)
	if err != nil || len(rows) != 4 {
		t.Fatalf("stackRows: %v", err)
	}
	if unsafe.SliceData(stacked[0].Data) != &buf[0] || stacked[0].Shape[0] != 4 || st.InPlace() != 2 || st.Held() {
		t.Fatalf("stackRows of adjoining rows: in place %d, buffer held %v", st.InPlace(), st.Held())
	}

	copied := func(what string, st *Stage, batch []*Sample) {
		t.Helper()
		before := st.InPlace()
		views, _, err := st.Stack(batch)
		if err != nil {
			t.Fatal(err)
		}
		var want []byte
		for _, s := range batch {
			want = append(want, s.Tensors[0].Data...)
		}
		if st.InPlace() != before || !bytes.Equal(views[0], want) {
			t.Errorf("%s: in place %d→%d, stacked %v, want a copy of %v", what, before, st.InPlace(), views[0], want)
		}
	}
	reversed := []*Sample{batch[1], batch[0]}
	copied("out of order", NewStage(false, 2), reversed)
	gap := []*Sample{batch[0], batch[2]}
	copied("with a row between", NewStage(false, 2), gap)
	other := rowsOf(append([]byte(nil), buf[8:16]...), 1)
	copied("in two buffers", NewStage(false, 2), []*Sample{batch[0], other[0]})
	// Without CUDA a stage asked for page-locked memory holds ordinary memory, and copies all
	// the same.
	copied("for a GPU", NewStage(true, 4), batch)
}
