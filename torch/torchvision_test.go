package torch_test

import (
	"bytes"
	"fmt"
	"slices"
	"testing"

	"github.com/torchd/torchd/torch"
)

// torchvision's operators come with the library (bin/libtorchvision.so, from the pinned
// torchvision wheel): a scripted module calling nms, batched_nms, roi_align (twice),
// roi_pool and ps_roi_align gives Python's outputs on Python's inputs (models/detector.py).
func TestTorchvisionOps(t *testing.T) {
	m, err := torch.Load(zoo(t, "detector", "ops.pt"), torch.WithDevice(testDevice()))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	var args []any
	for i := range 5 {
		args = append(args, npyTensor(t, zoo(t, "detector", fmt.Sprintf("ops_in_%d.npy", i))))
	}
	out, err := m.Forward(args...)
	if err != nil {
		t.Fatal(err)
	}
	defer torch.CloseValue(out)
	outs, ok := out.(torch.Tuple)
	if !ok || len(outs) != 6 {
		t.Fatalf("got %v, want a tuple of 6 tensors", out)
	}
	names := []string{"nms", "batched_nms", "roi_align", "roi_align aligned", "roi_pool", "ps_roi_align"}
	for i, name := range names {
		want := readNpy(t, zoo(t, "detector", fmt.Sprintf("ops_out_%d.npy", i)))
		got, err := outs[i].(*torch.Tensor).ToCPU()
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got.Shape(), want.Shape) {
			t.Errorf("%s: shape %v, want %v", name, got.Shape(), want.Shape)
			continue
		}
		if i < 2 { // indices of the kept boxes: exactly Python's, in its order
			if got.DType() != torch.Int64 || !bytes.Equal(got.Bytes(), want.Data) {
				t.Errorf("%s: kept %v, want Python's %d indices", name, got, want.Shape[0])
			}
			continue
		}
		wantF := npyFloat32s(want)
		d := maxAbsDiff(float32s(t, got), wantF)
		t.Logf("%s: max |go - python| = %.3g over %d values", name, d, len(wantF))
		if d > 1e-5 {
			t.Errorf("%s: max |go - python| = %g, want ≤ 1e-5", name, d)
		}
	}
}

// A scripted torchvision detector loads: its forward calls torchvision::nms and roi_align.
func TestTorchvisionDetectorLoads(t *testing.T) {
	m, err := torch.Load(zoo(t, "detector", "model.pt"), torch.WithDevice(testDevice()))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	img, err := torch.NewTensor(make([]float32, 3*64*48), 3, 64, 48)
	if err != nil {
		t.Fatal(err)
	}
	out, err := m.Forward([]*torch.Tensor{img})
	if err != nil {
		t.Fatal(err)
	}
	defer torch.CloseValue(out)
	tup, ok := out.(torch.Tuple)
	if !ok || len(tup) != 2 {
		t.Fatalf("got %v, want (losses, detections)", out)
	}
	dets, ok := tup[1].([]any)
	if !ok || len(dets) != 1 {
		t.Fatalf("detections: got %v, want one dict per image", tup[1])
	}
	d, ok := dets[0].(map[string]any)
	if !ok {
		t.Fatalf("detection: got %v", dets[0])
	}
	for _, k := range []string{"boxes", "labels", "scores"} {
		if _, ok := d[k].(*torch.Tensor); !ok {
			t.Errorf("detection has no tensor %q: %v", k, d)
		}
	}
}
