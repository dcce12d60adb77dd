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
	stacked, rows := stackRows([]*Sample{a, b})
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
