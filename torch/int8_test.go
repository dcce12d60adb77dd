package torch_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/torchd/torchd/torch"
)

// TestInt8Gate is the accuracy gate of the int8 packages (models/pt2.py --dtype int8,
// `make models-int8`: PT2E static quantization, calibrated on photographs 0..49 of the gate
// images), against the float32 TorchScript models on the 200 gate images as TestBF16Gates
// reports them: top-1 equal on at least 99%, and no logit further off than maxDiff:
//   - ResNet-18: 0.5 (its float32 logits span about 9);
//   - EfficientNet-Lite0, its stem and first two blocks in float32 (models/pt2.py INT8): 1.5
//     (its logits span about 12.5; depthwise convolutions quantize worse than ResNet's).
//
// Each needs its opt-in package and skips without it. ResNet-18's runs on any x86-64 CPU.
// EfficientNet-Lite0's runs where oneDNN computes int8 with VNNI or AMX-INT8: without them
// its u8×s8 products go through saturating 16-bit sums, and top-1 agreement falls to 97%
// (docs/design/engine.md, "EfficientNet-Lite0 in int8").
func TestInt8Gate(t *testing.T) {
	for _, g := range []struct {
		name      string
		mean, std [3]float32
		maxDiff   float64
		needVNNI  bool
	}{
		{"resnet18", [3]float32{0.485, 0.456, 0.406}, [3]float32{0.229, 0.224, 0.225}, 0.5, false},
		{"efficientnet_lite0", [3]float32{127. / 255, 127. / 255, 127. / 255}, [3]float32{128. / 255, 128. / 255, 128. / 255}, 1.5, true},
	} {
		t.Run(g.name, func(t *testing.T) {
			if g.needVNNI && !int8Native() {
				t.Skip("this CPU (or ONEDNN_MAX_CPU_ISA) has neither VNNI nor AMX-INT8: oneDNN's int8 sums saturate there and the gate does not hold")
			}
			pkg := filepath.Join("..", "models", "out", g.name, "model_int8.pt2")
			if _, err := os.Stat(pkg); err != nil {
				t.Skipf("no int8 package: `make models-int8` makes models/out/%s/model_int8.pt2", g.name)
			}
			p, err := torch.LoadPackage(pkg)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			if got := p.Metadata()["torchd.precision"]; got != "int8" {
				t.Fatalf("%s: torchd.precision %q, want int8", pkg, got)
			}
			fp32, err := torch.Load(zoo(t, g.name, "model.pt"))
			if err != nil {
				t.Fatal(err)
			}
			defer fp32.Close()

			images, n := gateImages(t, g.mean, g.std)
			want := logitsOf(t, fp32, images, n)
			got := logitsOf(t, p, images, n)
			a, widest := top1Agreement(got, want, 1000)
			d := maxAbsDiff(got, want)
			t.Logf("%s int8: top-1 agrees on %.1f%% of %d images (where it differs, float32's top two are at most %.3g apart), max |logit diff| %.3g",
				g.name, 100*a, n, widest, d)
			if a < 0.99 {
				t.Errorf("top-1 agrees with float32 on %.1f%% of %d images, want >= 99%%", 100*a, n)
			}
			if float64(d) > g.maxDiff {
				t.Errorf("max |logit diff| %g to float32, want <= %g", d, g.maxDiff)
			}
		})
	}
}

// int8Native reports whether oneDNN computes int8 products exactly here: the CPU has VNNI
// (AVX-512 or AVX) or AMX-INT8, and ONEDNN_MAX_CPU_ISA, if set, does not cap it below them.
func int8Native() bool {
	if !hostHasFlag("avx512_vnni") && !hostHasFlag("avx_vnni") && !hostHasFlag("amx_int8") {
		return false
	}
	isa := strings.ToUpper(os.Getenv("ONEDNN_MAX_CPU_ISA"))
	return isa == "" || isa == "ALL" || strings.Contains(isa, "VNNI") || strings.Contains(isa, "AMX")
}
