package core

import (
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/torchd/torchd/archive"
)

// ensembleArchive is a Triton ensemble as archive/triton reads one: IN → first (x→y) → MID →
// second (x→y) → OUT.
func ensembleArchive(t *testing.T, first, second string) *archive.Model {
	spec := func(n string) []archive.TensorSpec {
		return []archive.TensorSpec{{Name: n, DType: "float32", Shape: []int64{-1, 2}}}
	}
	return &archive.Model{Name: "pipeline", Version: "1", Kind: archive.KindTriton, Dir: t.TempDir(), Config: archive.ModelConfig{
		Handler: "tensor", Runtime: RuntimeEnsemble, Inputs: spec("IN"), Outputs: spec("OUT"),
		Ensemble: []archive.EnsembleStep{
			{Model: first, Inputs: map[string]string{"x": "IN"}, Outputs: map[string]string{"y": "MID"}},
			{Model: second, Inputs: map[string]string{"x": "MID"}, Outputs: map[string]string{"y": "OUT"}},
		},
	}}
}

func TestEnsemble(t *testing.T) {
	rt := &fakeRuntime{}
	r := fakeRegistry(t, rt)
	for _, n := range []string{"double", "again"} {
		if _, err := r.Add(n, "1", RegisterRequest{Synchronous: true}, fakeArchive(t, "")); err != nil {
			t.Fatal(err)
		}
	}
	again := rt.model // the second step's model
	if _, err := r.Add("pipeline", "1", RegisterRequest{Synchronous: true}, ensembleArchive(t, "double", "again")); err != nil {
		t.Fatal(err)
	}
	res, err := r.Serve(&Request{Model: "pipeline", Raw: true, Decode: sampleInput(1, 2, 3, 4)})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Out) != 1 || res.Out[0].Name != "OUT" {
		t.Fatalf("outputs %+v, want OUT", res.Out)
	}
	for i, w := range []float32{4, 8, 12, 16} {
		got := math.Float32frombits(binary.LittleEndian.Uint32(res.Out[0].Data[4*i:]))
		if math.Abs(float64(got-w)) > 1e-6 {
			t.Errorf("element %d = %v, want %v (each step doubles)", i, got, w)
		}
	}
	// A step that fails fails the request, naming the step; the ensemble goes on serving.
	again.failOn = 6
	_, err = r.Serve(&Request{Model: "pipeline", Raw: true, Decode: sampleInput(3, 1)})
	if err == nil || !strings.Contains(err.Error(), "step 2 (again)") || !errors.Is(err, ErrInference) {
		t.Errorf("a failing step: %v, want ErrInference naming step 2 (again)", err)
	}
	if _, err := r.Serve(&Request{Model: "pipeline", Raw: true, Decode: sampleInput(1, 1)}); err != nil {
		t.Errorf("after a failed step: %v", err)
	}
	st, err := r.Statistics("again", "")
	if err != nil || len(st) == 0 {
		t.Fatalf("statistics of a step's model: %v", err)
	}
}

func TestEnsembleRefusals(t *testing.T) {
	rt := &fakeRuntime{}
	r := fakeRegistry(t, rt)
	if _, err := r.Add("double", "1", RegisterRequest{Synchronous: true}, fakeArchive(t, "")); err != nil {
		t.Fatal(err)
	}
	// A model no one loads.
	_, err := r.Add("pipeline", "1", RegisterRequest{Synchronous: true}, ensembleArchive(t, "double", "nowhere"))
	if !errors.Is(err, ErrBadModel) || !strings.Contains(err.Error(), "nowhere") {
		t.Errorf("a missing model: %v, want ErrBadModel naming it", err)
	}
	// A tensor the model does not have.
	am := ensembleArchive(t, "double", "double")
	am.Config.Ensemble[1].Inputs = map[string]string{"z": "MID"}
	_, err = r.Add("pipeline", "1", RegisterRequest{Synchronous: true}, am)
	if !errors.Is(err, ErrBadModel) || !strings.Contains(err.Error(), `no input "z"`) {
		t.Errorf("a mismatched tensor: %v, want ErrBadModel naming it", err)
	}
	// A type the step does not give.
	am = ensembleArchive(t, "double", "double")
	am.Config.Outputs[0].DType = "int64"
	_, err = r.Add("pipeline", "1", RegisterRequest{Synchronous: true}, am)
	if !errors.Is(err, ErrBadModel) || !strings.Contains(err.Error(), "int64") {
		t.Errorf("a mismatched type: %v, want ErrBadModel", err)
	}
	if _, err := r.Serve(&Request{Model: "double", Raw: true, Decode: sampleInput(1, 1)}); err != nil {
		t.Errorf("the step's model after the refusals: %v", err)
	}
}
