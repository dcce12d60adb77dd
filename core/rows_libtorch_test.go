package core_test

import (
	"math"
	"sync"
	"testing"
	"time"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/backends/libtorch"
	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/core/coretest"
	"github.com/torchd/torchd/handlers"
)

// Eight images sent at once to the zoo's digits CNN (real LibTorch, the image handler) at
// batch 4 run as two batches in place: each preprocessed into its row of a slab, and the
// slab handed to the forward without a copy. Each answer equals the image's own answer at
// batch 1, within a relative float tolerance (a batch of four may take other kernels).
func TestImageBatchesRunInPlace(t *testing.T) {
	serve := func(r *core.Registry, img []byte) ([]float32, error) {
		res, err := r.Serve(&core.Request{Model: "digits", Raw: true, Decode: func(*core.ModelVersion) (core.Input, error) {
			return core.Input{Payloads: &handlers.Request{Inputs: []handlers.Payload{{Name: "body", ContentType: "image/png", Data: img}},
				Header: func(string) string { return "" }}}, nil
		}})
		if err != nil {
			return nil, err
		}
		return coretest.Float32s(res.Out[0]), nil
	}
	add := func(batch int) (*core.Registry, *core.ModelVersion, [][]byte) {
		am, imgs := digits(t)
		r := coretest.NewRegistryOf(t, libtorch.Backend{})
		v, err := r.Add("digits", "1", core.RegisterRequest{Name: "digits", Synchronous: true, Settings: archive.Settings{
			BatchSize: archive.Fixed(batch), MaxBatchDelay: archive.Fixed(time.Hour), MinWorkers: archive.Fixed(1)}}, am)
		if err != nil {
			t.Fatal(err)
		}
		return r, v, imgs
	}
	alone, _, imgs := add(1)
	want := make([][]float32, 8)
	for i := range want {
		var err error
		if want[i], err = serve(alone, imgs[i]); err != nil {
			t.Fatal(err)
		}
	}

	r, v, _ := add(4)
	got := make([][]float32, 8)
	var wg sync.WaitGroup
	for i := range got {
		wg.Go(func() {
			var err error
			if got[i], err = serve(r, imgs[i]); err != nil {
				t.Errorf("image %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	for i := range got {
		if len(got[i]) != len(want[i]) || len(want[i]) != 10 {
			t.Fatalf("image %d: %d scores in a batch, %d alone, want 10", i, len(got[i]), len(want[i]))
		}
		for k := range want[i] {
			// Relative: the trained model's logits differ in scale from CPU to CPU.
			if math.Abs(float64(got[i][k]-want[i][k])) > 1e-4*(1+math.Abs(float64(want[i][k]))) {
				t.Fatalf("image %d: scores %v in a batch, %v alone", i, got[i], want[i])
			}
		}
	}
	if s := v.Stats(); s.Batches != 2 || s.InPlace != 2 {
		t.Errorf("%d batches, %d in place; want 2 of 4, both in place", s.Batches, s.InPlace)
	}
}
