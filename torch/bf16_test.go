package torch_test

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
	"github.com/torchd/torchd/torch"
)

// bf16Native reports whether this CPU computes in bfloat16 (elsewhere LibTorch emulates it,
// and convolutions fall back to a slow path many times slower than float32).
func bf16Native() bool { return hostHasFlag("avx512_bf16") || hostHasFlag("amx_bf16") }

// pooled returns mean-pooled, L2-normalized embeddings of token embeddings [N, L, H] over the
// mask [N, L], as the text_embedding handler computes them.
func pooled(t *testing.T, x []float32, mask []int64, n int) [][]float64 {
	t.Helper()
	l := len(mask) / n
	h := len(x) / len(mask)
	out := make([][]float64, n)
	for i := range n {
		v := make([]float64, h)
		count := 0
		for j := range l {
			if mask[i*l+j] == 0 {
				continue
			}
			count++
			for k := range h {
				v[k] += float64(x[(i*l+j)*h+k])
			}
		}
		norm := 0.0
		for k := range v {
			v[k] /= float64(count)
			norm += v[k] * v[k]
		}
		for k := range v {
			v[k] /= math.Max(math.Sqrt(norm), 1e-12)
		}
		out[i] = v
	}
	return out
}

func cosine(a []float64, b []float32) float64 {
	var dot, na, nb float64
	for k := range a {
		dot += a[k] * float64(b[k])
		na += a[k] * a[k]
		nb += float64(b[k]) * float64(b[k])
	}
	return dot / math.Sqrt(na*nb)
}

// minilmCosines runs MiniLM's first n reference sequences through model and returns each
// embedding's cosine to eager PyTorch's float32 one.
func minilmCosines(t *testing.T, model torch.Model, n int64) []float64 {
	t.Helper()
	args := packageInputs(t, "minilm", n)
	out, err := model.Forward(args...)
	if err != nil {
		t.Fatal(err)
	}
	defer torch.CloseValue(out)
	if dt := out.(*torch.Tensor).DType(); dt != torch.Float32 {
		t.Fatalf("bf16 model answers %v, want float32", dt)
	}
	mask, err := torch.Data[int64](args[1].(*torch.Tensor))
	if err != nil {
		t.Fatal(err)
	}
	got := pooled(t, float32s(t, out), mask, int(n)) // before out is closed
	// A text's pooled embedding does not depend on the others in its batch.
	all := readNpy(t, zoo(t, "minilm", "pt2_ref_pooled_b64.npy"))
	want := npyFloat32s(all)
	h := len(want) / int(all.Shape[0])
	cos := make([]float64, n)
	for i := range cos {
		cos[i] = cosine(got[i], want[i*h:(i+1)*h])
	}
	return cos
}

// zooFP32Modules returns the fp32_modules of a zoo model's archive config
// (models/configs/NAME.toml): the submodules its bfloat16 recipe keeps in float32.
func zooFP32Modules(t *testing.T, name string) []string {
	t.Helper()
	// Only the key: the config's handler is known to the handlers package, not here.
	var c struct {
		FP32Modules []string `toml:"fp32_modules"`
	}
	if _, err := toml.DecodeFile(filepath.Join("..", "models", "configs", name+".toml"), &c); err != nil {
		t.Fatal(err)
	}
	return c.FP32Modules
}

// bf16Models loads a zoo model's float32 TorchScript, and its bfloat16 variants: TorchScript
// under autocast, and the package exported in bfloat16 when models/pt2.py --dtype bf16 has
// made it (model_bf16.pt2), each with the float32 submodules of the model's config.
func bf16Models(t *testing.T, name string) (fp32 torch.Model, bf16 map[string]torch.Model) {
	t.Helper()
	keep := zooFP32Modules(t, name)
	load := func(opts ...torch.LoadOption) torch.Model {
		m, err := torch.Load(zoo(t, name, "model.pt"), opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		return m
	}
	fp32 = load()
	bf16 = map[string]torch.Model{"torchscript": load(torch.WithBF16(keep...))}
	pkg := filepath.Join("..", "models", "out", name, "model_bf16.pt2")
	if _, err := os.Stat(pkg); err == nil {
		p, err := torch.LoadPackage(pkg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		md := p.Metadata()
		if md["torchd.precision"] != "bf16" {
			t.Fatalf("%s: torchd.precision %q, want bf16", pkg, md["torchd.precision"])
		}
		var got []string
		if s := md["torchd.fp32_modules"]; s != "" {
			if err := json.Unmarshal([]byte(s), &got); err != nil {
				t.Fatalf("%s: torchd.fp32_modules: %v", pkg, err)
			}
		}
		if !slices.Equal(got, keep) {
			t.Fatalf("%s: float32 modules %q, but the config's are %q: rebuild it (models/pt2.py --dtype bf16)", pkg, got, keep)
		}
		bf16["pt2"] = p
	} else {
		t.Logf("%s: no bf16 package (models/pt2.py --dtype bf16 makes it); TorchScript only", name)
	}
	return fp32, bf16
}

// TestBF16Runs checks, cheaply enough for every run, that precision bf16 reaches the model:
// the digits CNN in bfloat16 (TorchScript under autocast, and its bf16 package) answers
// float32 logits that differ from float32's by at most 0.25, so agree on the digit for the
// held-out rows but near ties.
func TestBF16Runs(t *testing.T) {
	fp32, bf16 := bf16Models(t, "digits")
	if _, ok := bf16["pt2"]; !ok {
		t.Fatal("models/out/digits/model_bf16.pt2 is missing: make models builds it")
	}
	x := packageInputs(t, "digits", 64)[0]
	want, err := fp32.Forward(x)
	if err != nil {
		t.Fatal(err)
	}
	defer torch.CloseValue(want)
	w := float32s(t, want)
	for kind, m := range bf16 {
		out, err := m.Forward(x)
		if err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		g := append([]float32(nil), float32s(t, out)...)
		torch.CloseValue(out)
		d := maxAbsDiff(g, w)
		if d == 0 || d > 0.25 {
			t.Errorf("%s: max |logit diff| %g to float32; want some (bfloat16 has 8 bits of mantissa), and at most 0.25", kind, d)
		}
		// Where the digit differs, float32's top two must be within 2d, where the rounding
		// decides: native and emulated bfloat16 round differently, and training on another
		// CPU makes other weights, so which held-out rows are near ties is the machine's.
		if a, widest := top1Agreement(g, w, 10); a < 1 && widest > 2*d {
			t.Errorf("%s: top-1 agrees with float32 on %.1f%% of 64 digits, and differs where float32's top two are %.3g apart (> 2 × %.3g)", kind, 100*a, widest, d)
		}
		t.Logf("digits %s bf16: max |logit diff| %.3g", kind, d)
	}

}

// forwardZoo loads a zoo model's model.pt with opts and returns its float32 output for x.
func forwardZoo(t *testing.T, name string, x *torch.Tensor, opts ...torch.LoadOption) []float32 {
	t.Helper()
	m, err := torch.Load(zoo(t, name, "model.pt"), opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	out, err := m.Forward(x)
	if err != nil {
		t.Fatal(err)
	}
	defer torch.CloseValue(out)
	if dt := out.(*torch.Tensor).DType(); dt != torch.Float32 {
		t.Fatalf("%s answers %v, want float32", name, dt)
	}
	return append([]float32(nil), float32s(t, out)...)
}

// TestBF16FP32Modules checks the float32 islands of precision bf16 on the digits CNN: with
// every layer kept float32 the bf16 module answers exactly float32's logits, frozen or not
// (autocast is off inside each, and each hands float32 on); with only the last layer kept,
// bfloat16 shows again; a name that forward never calls, or that is no dotted path, is
// refused at load.
func TestBF16FP32Modules(t *testing.T) {
	x := packageInputs(t, "digits", 64)[0].(*torch.Tensor)
	forward := func(opts ...torch.LoadOption) []float32 { return forwardZoo(t, "digits", x, opts...) }
	want := forward()
	all := torch.WithBF16("conv1", "conv2", "fc1", "fc2")
	if d := maxAbsDiff(forward(all), want); d != 0 {
		t.Errorf("every layer float32: max |logit diff| %g to float32, want 0", d)
	}
	// Freezing inlines the calls; the islands stay.
	if d := maxAbsDiff(forward(all, torch.WithFreeze()), forward(torch.WithFreeze())); d != 0 {
		t.Errorf("every layer float32, frozen: max |logit diff| %g to float32 frozen, want 0", d)
	}
	bf16 := forward(torch.WithBF16())
	last := forward(torch.WithBF16("fc2"))
	if d := maxAbsDiff(last, want); d == 0 {
		t.Error("fc2 float32 only: logits equal float32's, want bfloat16's differences")
	}
	if d := maxAbsDiff(last, bf16); d == 0 {
		t.Error("fc2 float32 only: logits equal all-bfloat16's, want fc2 in float32")
	}
	for _, c := range []struct {
		names []string
		err   string
	}{
		{[]string{"conv3"}, "float32 module conv3: forward calls no submodule of that name"},
		{[]string{"conv1.weight"}, "float32 module conv1.weight: forward calls no submodule of that name"},
		{[]string{"conv1,conv2"}, `float32 module "conv1,conv2": want a dotted submodule path`},
		{[]string{""}, `float32 module "": want a dotted submodule path`},
	} {
		m, err := torch.Load(zoo(t, "digits", "model.pt"), torch.WithBF16(c.names...))
		if err == nil {
			m.Close()
			t.Errorf("%q: loaded, want an error", c.names)
		} else if !strings.Contains(err.Error(), c.err) || !errors.Is(err, torch.ErrFP32Modules) {
			t.Errorf("%q: %v, want %q, and ErrFP32Modules", c.names, err, c.err)
		}
	}
}

// TestBF16TracedConvolutions checks that a traced model's convolutions run in bfloat16: its
// graph has aten::_convolution, which autocast's own CPU list leaves in float32. With
// EfficientNet-Lite0's classifier (its only linear layer) kept float32, the convolutions are
// all that can differ from float32, and they must.
func TestBF16TracedConvolutions(t *testing.T) {
	images, _ := gateImages(t, [3]float32{0.5, 0.5, 0.5}, [3]float32{0.5, 0.5, 0.5})
	x := mustTensor(t, images[:2*3*224*224], 2, 3, 224, 224)
	bf16, fp32 := forwardZoo(t, "efficientnet_lite0", x, torch.WithBF16("_fc")), forwardZoo(t, "efficientnet_lite0", x)
	if d := maxAbsDiff(bf16, fp32); d == 0 {
		t.Error("classifier float32: logits equal float32's, want the convolutions' bfloat16 differences")
	}
}

// TestBF16GateMiniLM is the accuracy gate of precision bf16 for MiniLM: each of 32 texts'
// embedding, in bfloat16, has a cosine of at least 0.999 to eager PyTorch's float32 one.
func TestBF16GateMiniLM(t *testing.T) {
	_, bf16 := bf16Models(t, "minilm")
	for kind, m := range bf16 {
		worst := 1.0
		for i, c := range minilmCosines(t, m, 32) {
			worst = min(worst, c)
			if c < 0.999 {
				t.Errorf("%s: text %d: cosine %.5f to float32, want >= 0.999", kind, i, c)
			}
		}
		t.Logf("minilm %s bf16: lowest cosine %.5f over 32 texts", kind, worst)
	}
}

// top1Agreement returns the share of rows whose top class in a is b's, and among the rows
// that differ the widest margin between b's top two logits (0 when none differ): how near a
// tie the reference was where the two part.
func top1Agreement(a, b []float32, classes int) (agree, widest float64) {
	argmax := func(v []float32) int {
		best := 0
		for i := range v {
			if v[i] > v[best] {
				best = i
			}
		}
		return best
	}
	n, same := len(a)/classes, 0
	for i := range n {
		ra, rb := a[i*classes:(i+1)*classes], b[i*classes:(i+1)*classes]
		top := argmax(rb)
		if argmax(ra) == top {
			same++
			continue
		}
		second := math.Inf(-1)
		for j, v := range rb {
			if j != top {
				second = math.Max(second, float64(v))
			}
		}
		widest = math.Max(widest, float64(rb[top])-second)
	}
	return float64(same) / float64(n), widest
}

// gateImages returns the bf16 gate's images (models/pt2.py gate_images: ai-benchmark's 100
// photographs and their mirror images, 224x224) normalized with mean and std.
func gateImages(t *testing.T, mean, std [3]float32) (data []float32, n int) {
	t.Helper()
	a := readNpy(t, zoo(t, "efficientnet_lite0", "bf16_gate_images.npy"))
	n = int(a.Shape[0])
	plane := 224 * 224
	data = make([]float32, len(a.Data))
	for i, u := range a.Data {
		c := (i / plane) % 3
		data[i] = (float32(u)/255 - mean[c]) / std[c]
	}
	return data, n
}

// logitsOf runs model over images in batches of 16.
func logitsOf(t *testing.T, m torch.Model, images []float32, n int) []float32 {
	t.Helper()
	row := len(images) / n
	var out []float32
	for i := 0; i < n; i += 16 {
		k := min(16, n-i)
		x := mustTensor(t, images[i*row:(i+k)*row], int64(k), 3, 224, 224)
		y, err := m.Forward(x)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, float32s(t, y)...)
		torch.CloseValue(y)
	}
	return out
}

// TestBF16Gates are the image models' accuracy gates of precision bf16 (MiniLM's is
// TestBF16GateMiniLM), so that the trade-off is a number:
//   - EfficientNet-Lite0: top-1 equals float32's on at least 99% of 200 images (100
//     photographs, each of a different ImageNet class, and their mirror images);
//   - ResNet-18 on the same images (ImageNet's normalization): top-1 equals float32's on at
//     least 99%, and no logit is more than 0.1 off (its float32 logits span about 9).
//
// Each runs with the float32 modules of the model's config (fp32_modules).
//
// They run where the CPU computes in bfloat16 (avx512_bf16 or AMX), or with
// TORCHD_BF16_GATES=1: elsewhere LibTorch emulates bfloat16, and the convolutions take a slow
// path that makes the 200 images a matter of many minutes.
func TestBF16Gates(t *testing.T) {
	if !bf16Native() && os.Getenv("TORCHD_BF16_GATES") == "" {
		t.Skip("this CPU has neither avx512_bf16 nor amx_bf16, so bfloat16 is emulated (slowly); TORCHD_BF16_GATES=1 runs the gates anyway")
	}
	for _, g := range []struct {
		name      string
		mean, std [3]float32
		agree     float64
		maxDiff   float64
	}{
		{"efficientnet_lite0", [3]float32{127. / 255, 127. / 255, 127. / 255}, [3]float32{128. / 255, 128. / 255, 128. / 255}, 0.99, math.Inf(1)},
		{"resnet18", [3]float32{0.485, 0.456, 0.406}, [3]float32{0.229, 0.224, 0.225}, 0.99, 0.1},
	} {
		t.Run(g.name, func(t *testing.T) {
			images, n := gateImages(t, g.mean, g.std)
			fp32, bf16 := bf16Models(t, g.name)
			want := logitsOf(t, fp32, images, n)
			for kind, m := range bf16 {
				got := logitsOf(t, m, images, n)
				a, widest := top1Agreement(got, want, 1000)
				d := maxAbsDiff(got, want)
				t.Logf("%s %s bf16: top-1 agrees on %.1f%% of %d images (where it differs, float32's top two are at most %.3g apart), max |logit diff| %.3g",
					g.name, kind, 100*a, n, widest, d)
				if a < g.agree {
					t.Errorf("%s: top-1 agrees with float32 on %.1f%% of %d images, want >= %.0f%%", kind, 100*a, n, 100*g.agree)
				}
				if float64(d) > g.maxDiff {
					t.Errorf("%s: max |logit diff| %g to float32, want <= %g", kind, d, g.maxDiff)
				}
			}
		})
	}
}
