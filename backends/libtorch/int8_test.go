package libtorch_test

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/oip"
)

// TestInt8PackageOverHTTP serves ResNet-18's opt-in int8 package (`make models-int8`) from an
// archive whose config names no precision, so it is served in int8 as the package says, and
// sends it the first 32 gate images (photographs of PyPI's ai-benchmark, ImageNet-normalized)
// in Open Inference Protocol batches: its top-1 labels agree with the float32 package's on
// all but at most one (the accuracy gate, torch's TestInt8Gate, asks 99% of 200). Registered
// with precision=fp32 it is refused with a 400, and so is TorchScript with precision=int8
// (int8 is a package's, quantized at export). Without the package only that last check runs.
func TestInt8PackageOverHTTP(t *testing.T) {
	s := newServer(t, 0)
	r := s.manage("POST", "/models?url=resnet18.mar&model_name=x&precision=int8&synchronous=true")
	errorShape(t, r, 400, "ModelException", "precision int8 is for AOTInductor packages exported in int8")
	pkg := filepath.Join(zooDir, "resnet18", "model_int8.pt2")
	if _, err := os.Stat(pkg); err != nil {
		t.Skip("no int8 package: `make models-int8` makes models/out/resnet18/model_int8.pt2")
	}
	out, err := archive.Write(archive.WriteOptions{ModelName: "resnet18_int8", SerializedFile: pkg,
		ConfigFile: filepath.Join("..", "..", "models", "configs", "resnet18.toml"), ExtraFiles: []string{filepath.Join(zooDir, "resnet18", "index_to_name.json")},
		ExportPath: s.scratch, Format: archive.FormatNoArchive, Force: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(out) })

	r = s.manage("POST", "/models?url=resnet18_int8&model_name=x&precision=fp32&synchronous=true")
	errorShape(t, r, 400, "ModelException", "precision fp32, but model_int8.pt2 was exported in int8")
	s.register(t, "url=resnet18_int8&initial_workers=1&synchronous=true")
	s.register(t, "url=resnet18_pt2.mar&precision=fp32&initial_workers=1&synchronous=true")

	const n, classes = 32, 1000
	a := readZooNpy(t, "efficientnet_lite0", "bf16_gate_images.npy")
	mean, std := [3]float32{0.485, 0.456, 0.406}, [3]float32{0.229, 0.224, 0.225}
	plane := 224 * 224
	data := make([]byte, 4*n*3*plane)
	for i := range n * 3 * plane {
		c := (i / plane) % 3
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits((float32(a.Data[i])/255-mean[c])/std[c]))
	}
	// Batches of 8: 32 images (19 MB) are over the default max_request_size.
	var want, got []float32
	for i := 0; i < n; i += 8 {
		rows := []oip.Tensor{{Name: "input__0", Datatype: "FP32", Shape: []int64{8, 3, 224, 224}, Data: data[4*i*3*plane : 4*(i+8)*3*plane]}}
		want = append(want, inferPackage(t, s, "resnet18_pt2", rows)...)
		got = append(got, inferPackage(t, s, "resnet18_int8", rows)...)
	}
	if len(got) != n*classes || len(want) != n*classes {
		t.Fatalf("%d and %d logits, want %d", len(got), len(want), n*classes)
	}
	differ := 0
	for i := range n {
		if argmax(got[i*classes:(i+1)*classes]) != argmax(want[i*classes:(i+1)*classes]) {
			differ++
		}
	}
	t.Logf("int8 top-1 differs from float32's on %d of %d images", differ, n)
	if differ > 1 {
		t.Errorf("int8 top-1 differs from float32's on %d of %d images, want at most 1", differ, n)
	}
}
