package handlers_test

import (
	"bytes"
	"encoding/binary"
	"math"
	"strings"
	"testing"
	"unsafe"

	"github.com/torchd/torchd/handlers"
	"github.com/torchd/torchd/internal/tolerance"
	"github.com/torchd/torchd/torch"
)

// digitsSample is one request of rows 1×28×28 images, its values seeded by seed.
func digitsSample(seed, rows int) *handlers.Sample {
	data := make([]byte, 4*rows*784)
	for k := 0; k < len(data); k += 4 {
		binary.LittleEndian.PutUint32(data[k:], math.Float32bits(float32((seed*13+k/4)%255)/255))
	}
	return &handlers.Sample{Items: rows, Tensors: []handlers.Tensor{{DType: torch.Float32, Shape: []int64{int64(rows), 1, 28, 28}, Data: data}}}
}

// A worker's stage is allocated once, by its first batch, and every later batch of at most
// as many rows reuses it: stacking then allocates nothing. Batched outputs through it equal
// each request's alone. The stage asks for pinned memory, which this CPU build cannot give,
// so it is the fallback that runs: ordinary memory, no error, and every batch (one request
// too) staged as on a GPU.
func TestStageIsReusedAcrossBatches(t *testing.T) {
	h, m := zooHandler(t, "tensor", "digits", "digits_tensor")
	for _, pin := range []bool{false, true} {
		st := handlers.NewStage(pin, 8)
		defer st.Close()
		alone := map[int][]byte{}
		for round, sizes := range [][]int{{8, 1, 2}, {3, 1, 4}, {1}, {5, 3}} {
			var batch []*handlers.Sample
			for i, rows := range sizes {
				batch = append(batch, digitsSample(round*10+i, rows))
			}
			got, err := handlers.InferStaged(h, m, batch, st)
			if err != nil {
				t.Fatal(err)
			}
			for i, s := range batch {
				seed := round*10 + i
				if alone[seed] == nil {
					a, err := handlers.Infer(h, m, []*handlers.Sample{s})
					if err != nil {
						t.Fatal(err)
					}
					alone[seed] = a[0][0].Data
				}
				if len(got[i]) != 1 || got[i][0].Shape[0] != int64(s.Items) {
					t.Fatalf("pin %v round %d sample %d: output %v", pin, round, i, got[i])
				}
				if d := maxAbsDiff(got[i][0].Data, alone[seed]); d > tolerance.Kernels {
					t.Errorf("pin %v round %d sample %d: batched differs from alone by %g", pin, round, i, d)
				}
			}
		}
		if st.Pinned() {
			t.Errorf("pin %v: the stage reports pinned memory on a CPU build", pin)
		}
		if st.Allocs() != 1 {
			t.Errorf("pin %v: the stage was allocated %d times for batches of at most 11 rows after one of 11", pin, st.Allocs())
		}
	}
}

func maxAbsDiff(a, b []byte) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	d := 0.0
	for k := 0; k+4 <= len(a); k += 4 {
		x := math.Float32frombits(binary.LittleEndian.Uint32(a[k:]))
		y := math.Float32frombits(binary.LittleEndian.Uint32(b[k:]))
		d = max(d, math.Abs(float64(x-y)))
	}
	return d
}

// Stack lays each input's rows out sample after sample, each input aligned, and allocates
// nothing once its buffer is large enough; a larger batch grows it once.
func TestStackLayoutAndAllocations(t *testing.T) {
	sample := func(seed byte, rows int) *handlers.Sample {
		f := bytes.Repeat([]byte{seed}, 4*3*rows)
		ids := bytes.Repeat([]byte{seed + 100}, 8*2*rows)
		return &handlers.Sample{Items: rows, Tensors: []handlers.Tensor{
			{DType: torch.Float32, Shape: []int64{int64(rows), 3}, Data: f},
			{DType: torch.Int64, Shape: []int64{int64(rows), 2}, Data: ids},
		}}
	}
	batch := []*handlers.Sample{sample(1, 2), sample(2, 1), sample(3, 3)}
	st := handlers.NewStage(false, 4)
	defer st.Close()
	views, total, err := st.Stack(batch)
	if err != nil {
		t.Fatal(err)
	}
	if total != 6 || len(views) != 2 {
		t.Fatalf("total %d, %d views; want 6, 2", total, len(views))
	}
	for i, want := range [][]byte{
		append(append(bytes.Repeat([]byte{1}, 24), bytes.Repeat([]byte{2}, 12)...), bytes.Repeat([]byte{3}, 36)...),
		append(append(bytes.Repeat([]byte{101}, 32), bytes.Repeat([]byte{102}, 16)...), bytes.Repeat([]byte{103}, 48)...),
	} {
		if !bytes.Equal(views[i], want) {
			t.Errorf("input %d stacked as %v, want %v", i, views[i], want)
		}
		if p := uintptr(unsafe.Pointer(unsafe.SliceData(views[i]))); p%8 != 0 {
			t.Errorf("input %d starts at %#x, not aligned for int64", i, p)
		}
	}
	small := batch[:2]
	if n := testing.AllocsPerRun(20, func() {
		if _, _, err := st.Stack(small); err != nil {
			t.Fatal(err)
		}
		if _, _, err := st.Stack(batch); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("stacking into a large enough stage allocates %v times a run", n)
	}
	if st.Allocs() != 1 {
		t.Errorf("stage allocated %d times, want 1", st.Allocs())
	}
	big := append(append([]*handlers.Sample{}, batch...), sample(4, 5))
	if _, total, err := st.Stack(big); err != nil || total != 11 {
		t.Fatalf("big batch: total %d, %v", total, err)
	}
	if st.Allocs() != 2 {
		t.Errorf("a batch larger than the stage grew it %d times, want once", st.Allocs()-1)
	}
}

// Samples that cannot stack are refused with the reason, and the stage serves the next batch.
func TestStackRefusals(t *testing.T) {
	good := func() *handlers.Sample {
		return &handlers.Sample{Items: 1, Tensors: []handlers.Tensor{{DType: torch.Float32, Shape: []int64{1, 2}, Data: make([]byte, 8)}}}
	}
	cases := []struct {
		name string
		bad  *handlers.Sample
		want string
	}{
		{"another dtype", &handlers.Sample{Items: 1, Tensors: []handlers.Tensor{{DType: torch.Int32, Shape: []int64{1, 2}, Data: make([]byte, 8)}}}, "cannot batch with"},
		{"another trailing shape", &handlers.Sample{Items: 1, Tensors: []handlers.Tensor{{DType: torch.Float32, Shape: []int64{1, 3}, Data: make([]byte, 12)}}}, "cannot batch with"},
		{"more inputs", &handlers.Sample{Items: 1, Tensors: []handlers.Tensor{good().Tensors[0], good().Tensors[0]}}, "have 1 and 2 inputs"},
		{"data short of its shape", &handlers.Sample{Items: 1, Tensors: []handlers.Tensor{{DType: torch.Float32, Shape: []int64{1, 2}, Data: make([]byte, 4)}}}, "has 4 bytes"},
		{"items not its leading dimension", &handlers.Sample{Items: 2, Tensors: []handlers.Tensor{{DType: torch.Float32, Shape: []int64{1, 2}, Data: make([]byte, 8)}}}, "does not lead with"},
	}
	st := handlers.NewStage(false, 2)
	defer st.Close()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := st.Stack([]*handlers.Sample{good(), c.bad})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error containing %q", err, c.want)
			}
			if _, total, err := st.Stack([]*handlers.Sample{good(), good()}); err != nil || total != 2 {
				t.Fatalf("the next batch: total %d, %v", total, err)
			}
		})
	}
}
