package handlers

import (
	"bytes"
	"testing"

	"github.com/torchd/torchd/internal/bytestr"
	"github.com/torchd/torchd/torch"
)

// Samples of the same trailing shapes stack along the rows and come back as they were;
// strings split by elements across a batch's samples.
func TestStackRows(t *testing.T) {
	a := &Sample{Tensors: []Tensor{{DType: torch.Float32, Shape: []int64{1, 2}, Data: []byte("abcdefgh")}}}
	b := &Sample{Tensors: []Tensor{{DType: torch.Float32, Shape: []int64{2, 2}, Data: []byte("ijklmnopqrstuvwx")}}}
	c := &Sample{Tensors: []Tensor{{DType: torch.Float32, Shape: []int64{1, 3}, Data: []byte("0123456789ab")}}}
	if !stackable([]*Sample{a, b}) || stackable([]*Sample{a, c}) {
		t.Fatal("stackable: want rows of two to stack and a row of three not to")
	}
	st := NewStage(false, 4)
	stacked, rows, err := st.stackRows([]*Sample{a, b})
	if err != nil {
		t.Fatal(err)
	}
	if got := stacked[0].Shape; len(got) != 2 || got[0] != 3 || got[1] != 2 {
		t.Fatalf("stacked shape %v, want [3 2]", got)
	}
	back, err := unstackRows(stacked, []*Sample{a, b}, rows)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(back[0][0].Data, a.Tensors[0].Data) || !bytes.Equal(back[1][0].Data, b.Tensors[0].Data) {
		t.Errorf("unstacked %q and %q", back[0][0].Data, back[1][0].Data)
	}
	if _, err := unstackRows([]Tensor{{Shape: []int64{2, 2}}}, []*Sample{a, b}, rows); err == nil {
		t.Error("an output of 2 rows for a batch of 3 was cut without an error")
	}

	// Each input stacks its own rows: a second input of two rows a sample stacks to four.
	two := func(x byte) *Sample {
		return &Sample{Tensors: []Tensor{
			{DType: torch.Uint8, Shape: []int64{1, 1}, Data: []byte{x}},
			{DType: torch.Uint8, Shape: []int64{2, 1}, Data: []byte{x, x}},
		}}
	}
	mixed, _, err := st.stackRows([]*Sample{two(1), two(2)})
	if err != nil {
		t.Fatal(err)
	}
	if mixed[0].Shape[0] != 2 || mixed[1].Shape[0] != 4 || !bytes.Equal(mixed[1].Data, []byte{1, 1, 2, 2}) {
		t.Errorf("inputs of 1 and 2 rows a sample stacked to %v and %v %v", mixed[0].Shape, mixed[1].Shape, mixed[1].Data)
	}

	out := Tensor{DType: torch.Bytes, Name: "s", Shape: []int64{3, 1}, Data: bytestr.Join([][]byte{[]byte("one"), []byte("two!"), []byte("3")})}
	res, err := unstackRows([]Tensor{out}, make([]*Sample, 2), []int64{1, 2})
	if err != nil {
		t.Fatal(err)
	}
	second, _ := bytestr.Split(res[1][0].Data)
	if len(second) != 2 || string(second[0]) != "two!" || res[1][0].Shape[0] != 2 {
		t.Errorf("the second sample's strings: %q shape %v", second, res[1][0].Shape)
	}
}

// RunRows stacks every batch into the worker's stage, allocated once for the largest, and
// what run sees is each batch's rows in order.
func TestRunRowsReusesStage(t *testing.T) {
	st := NewStage(false, 4)
	row := func(b byte) *Sample {
		return &Sample{Items: 1, Tensors: []Tensor{{DType: torch.Uint8, Shape: []int64{1, 2}, Data: []byte{b, b + 1}}}}
	}
	for _, n := range []int{4, 2, 3} {
		batch := make([]*Sample, n)
		var want []byte
		for i := range batch {
			batch[i] = row(byte(10 * i))
			want = append(want, byte(10*i), byte(10*i+1))
		}
		outs, err := RunRows(batch, st, func(ts []Tensor) ([]Tensor, error) {
			if !bytes.Equal(ts[0].Data, want) || ts[0].Shape[0] != int64(n) {
				t.Errorf("batch of %d: run saw %v %v, want %v", n, ts[0].Shape, ts[0].Data, want)
			}
			// An output of its own, as the runtimes copy theirs out.
			return []Tensor{{DType: torch.Uint8, Shape: ts[0].Shape, Data: bytes.Clone(ts[0].Data)}}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(outs) != n || !bytes.Equal(outs[n-1][0].Data, batch[n-1].Tensors[0].Data) {
			t.Errorf("batch of %d: the last sample's output is %v", n, outs[n-1][0].Data)
		}
	}
	if st.Allocs() != 1 {
		t.Errorf("the stage was allocated %d times for three batches of at most 4 rows, want 1", st.Allocs())
	}
}
