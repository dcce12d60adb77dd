package torch_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/torchd/torchd/torch"
)

// TestInt8Gate is the accuracy gate of ResNet-18's int8 package (models/pt2.py --dtype int8,
// `make models-int8`: PT2E static quantization, calibrated on photographs 0..49 of the gate
// images), against the float32 TorchScript model on the 200 gate images as TestBF16Gates
// reports them: top-1 equal on at least 99%, and no logit more than 0.5 off (the float32
// logits span about 9). It needs the opt-in package and skips without it; it runs on any
// x86-64 CPU (oneDNN computes int8 with AVX2 where there is no VNNI, only slower).
func TestInt8Gate(t *testing.T) {
	pkg := filepath.Join("..", "models", "out", "resnet18", "model_int8.pt2")
	if _, err := os.Stat(pkg); err != nil {
		t.Skip("no int8 package: `make models-int8` makes models/out/resnet18/model_int8.pt2")
	}
	p, err := torch.LoadPackage(pkg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if got := p.Metadata()["torchd.precision"]; got != "int8" {
		t.Fatalf("%s: torchd.precision %q, want int8", pkg, got)
	}
	fp32, err := torch.Load(zoo(t, "resnet18", "model.pt"))
	if err != nil {
		t.Fatal(err)
	}
	defer fp32.Close()

	images, n := gateImages(t, [3]float32{0.485, 0.456, 0.406}, [3]float32{0.229, 0.224, 0.225})
	want := logitsOf(t, fp32, images, n)
	got := logitsOf(t, p, images, n)
	a, widest := top1Agreement(got, want, 1000)
	d := maxAbsDiff(got, want)
	t.Logf("resnet18 int8: top-1 agrees on %.1f%% of %d images (where it differs, float32's top two are at most %.3g apart), max |logit diff| %.3g",
		100*a, n, widest, d)
	if a < 0.99 {
		t.Errorf("top-1 agrees with float32 on %.1f%% of %d images, want >= 99%%", 100*a, n)
	}
	if d > 0.5 {
		t.Errorf("max |logit diff| %g to float32, want <= 0.5", d)
	}
}
