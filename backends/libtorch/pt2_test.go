package libtorch_test

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/internal/tolerance"
	"github.com/torchd/torchd/oip"
)

// zooPackages are the zoo's AOTInductor packages (models/pt2.py) as the store archives
// them, with their exported batch max.
var zooPackages = []struct {
	name, zoo string
	batchMax  int
}{
	{"digits_pt2", "digits", 64},
	{"resnet18_pt2", "resnet18", 32},
	{"efficientnet_lite0_pt2", "efficientnet_lite0", 32},
	{"textcls_pt2", "textcls", 64},
	{"minilm_pt2", "minilm", 64},
}

// packageRows returns the inputs of batch n of a zoo package's reference data: the first n
// rows, for a text model trimmed to the longest of them.
func packageRows(t testing.TB, zoo string, n int) []oip.Tensor {
	t.Helper()
	if _, err := os.Stat(filepath.Join(zooDir, zoo, "pt2_ref_input.npy")); err == nil {
		a := readZooNpy(t, zoo, "pt2_ref_input.npy")
		row := len(a.Data) / int(a.Shape[0])
		return []oip.Tensor{{Name: "input__0", Datatype: "FP32", Shape: append([]int64{int64(n)}, a.Shape[1:]...), Data: a.Data[:n*row]}}
	}
	ids, mask := readZooNpy(t, zoo, "pt2_ref_input_ids.npy"), readZooNpy(t, zoo, "pt2_ref_attention_mask.npy")
	width := int(ids.Shape[1])
	longest := 0
	for i := range n {
		k := 0
		for j := range width {
			k += int(binary.LittleEndian.Uint64(mask.Data[8*(i*width+j):]))
		}
		longest = max(longest, k)
	}
	trim := func(b []byte) []byte {
		out := make([]byte, 0, 8*n*longest)
		for i := range n {
			out = append(out, b[8*i*width:8*(i*width+longest)]...)
		}
		return out
	}
	shape := []int64{int64(n), int64(longest)}
	return []oip.Tensor{{Name: "input_ids", Datatype: "INT64", Shape: shape, Data: trim(ids.Data)},
		{Name: "attention_mask", Datatype: "INT64", Shape: shape, Data: trim(mask.Data)}}
}

// inferPackage sends one request of rows to a zoo package and returns its float32 outputs:
// the Open Inference Protocol's tensors for the image and text classifiers, the
// text_embedding handler's pooled embeddings (of the same token ids, in JSON) for MiniLM.
func inferPackage(t testing.TB, s *server, name string, rows []oip.Tensor) []float32 {
	t.Helper()
	if name == "minilm_pt2" {
		ids, mask := rows[0], rows[1]
		n, width := int(ids.Shape[0]), int(ids.Shape[1])
		var seqs [][]int64
		for i := range n {
			var seq []int64
			for j := range width {
				if binary.LittleEndian.Uint64(mask.Data[8*(i*width+j):]) != 0 {
					seq = append(seq, int64(binary.LittleEndian.Uint64(ids.Data[8*(i*width+j):])))
				}
			}
			seqs = append(seqs, seq)
		}
		body, _ := json.Marshal(seqs)
		r := s.do("POST", "/predictions/"+name, "application/json", body)
		if r.status != 200 {
			t.Fatalf("%s: %d %s", name, r.status, r.body)
		}
		var emb [][]float32
		r.json(t, &emb)
		var out []float32
		for _, e := range emb {
			out = append(out, e...)
		}
		return out
	}
	outs := s.infer(t, name, rows)
	if len(outs) != 1 || outs[0].Datatype != "FP32" || outs[0].Shape[0] != rows[0].Shape[0] {
		t.Fatalf("%s: outputs %+v", name, outs)
	}
	return f32s(outs[0].Data)
}

// TestZooPackagesOverHTTP serves every zoo package in fp32 (resnet18_pt2's int8 variant aside)
// and sends each one request of batch sizes 1, 2, 7 and its exported max: the answers equal
// eager PyTorch's within 1e-5 (the references are models/pt2.py's). Then single-row requests sent at once, batched by the
// server, equal the same rows sent one by one.
func TestZooPackagesOverHTTP(t *testing.T) {
	// 32 images of 3x224x224 float32 are 19 MB, over the default request limit.
	s := newServer(t, 32000000)
	for _, m := range zooPackages {
		t.Run(m.name, func(t *testing.T) {
			s.register(t, "url="+m.name+".mar&precision=fp32&max_batch_delay=20&initial_workers=1&synchronous=true")
			ref := "pt2_ref_output_b%d.npy"
			if m.zoo == "minilm" {
				ref = "pt2_ref_pooled_b%d.npy"
			}
			for _, n := range []int{1, 2, 7, m.batchMax} {
				got := inferPackage(t, s, m.name, packageRows(t, m.zoo, n))
				closeTo(t, fmt.Sprintf("batch %d", n), got, f32s(readZooNpy(t, m.zoo, fmt.Sprintf(ref, n)).Data), tolerance.Kernels)
			}
			const k = 8
			rows := packageRows(t, m.zoo, k)
			one := func(i int) []oip.Tensor {
				var r []oip.Tensor
				for _, x := range rows {
					b := len(x.Data) / k
					r = append(r, oip.Tensor{Name: x.Name, Datatype: x.Datatype, Shape: append([]int64{1}, x.Shape[1:]...), Data: x.Data[i*b : (i+1)*b]})
				}
				return r
			}
			alone := make([][]float32, k)
			for i := range k {
				alone[i] = inferPackage(t, s, m.name, one(i))
			}
			batched := make([][]float32, k)
			var wg sync.WaitGroup
			for i := range k {
				wg.Go(func() { batched[i] = inferPackage(t, s, m.name, one(i)) })
			}
			wg.Wait()
			for i := range k {
				closeTo(t, fmt.Sprintf("row %d batched against alone", i), batched[i], alone[i], tolerance.Kernels)
			}
			if mean := s.meanBatch(t, m.name); mean <= 1.05 {
				t.Fatalf("no batching under concurrent load: mean batch size %.2f", mean)
			}
		})
	}
}

// TestPackageOverHTTP serves the digits AOTInductor package through the tensor handler:
// concurrent requests are batched into one package call, and each answer equals the one the
// same request got alone; the image handler's answers match the TorchScript model's.
func TestPackageOverHTTP(t *testing.T) {
	s := newServer(t, 0)
	s.register(t, "url=digits_pt2.mar&batch_size=16&max_batch_delay=20&initial_workers=2")
	n := 48
	bodies := make([][]byte, n)
	for i := range bodies {
		v := float64(i)/float64(n)*2 - 1
		row := strings.Repeat(strconv.FormatFloat(v, 'f', 6, 64)+",", 28*28)
		bodies[i] = []byte(fmt.Sprintf(`{"data": [%s], "shape": [1, 1, 28, 28]}`, strings.TrimSuffix(row, ",")))
	}
	alone := make([][]float64, n)
	for i, b := range bodies {
		alone[i] = tensorData(t, s.do("POST", "/predictions/digits_pt2", "application/json", b))
	}
	batched := make([][]float64, n)
	var wg sync.WaitGroup
	for i, b := range bodies {
		wg.Go(func() {
			batched[i] = tensorData(t, s.do("POST", "/predictions/digits_pt2", "application/json", b))
		})
	}
	wg.Wait()
	for i := range bodies {
		for k := range alone[i] {
			if math.Abs(alone[i][k]-batched[i][k]) > tolerance.Kernels {
				t.Fatalf("request %d: batched output %v differs from its one-by-one output %v", i, batched[i], alone[i])
			}
		}
	}
	if mean := s.meanBatch(t, "digits_pt2"); mean <= 1.05 {
		t.Fatalf("no batching under concurrent load: mean batch size %.2f", mean)
	}

	// The same PNGs through the image handler: top-1 equals the TorchScript model's.
	s.register(t, "url=digits_pt2_img.mar&batch_size=8&initial_workers=1")
	s.register(t, "url=digits.mar&initial_workers=1")
	pngs := heldOut(t)
	for i, png := range pngs[:40] {
		got := top1(s.do("POST", "/predictions/digits_pt2_img", "image/png", png).body)
		want := top1(s.do("POST", "/predictions/digits", "image/png", png).body)
		if got != want {
			t.Fatalf("image %d: package says %s, TorchScript says %s", i, got, want)
		}
	}

	// KServe v2 metadata comes from the package's recorded signature.
	r := s.do("GET", "/v2/models/digits_pt2", "", nil)
	if r.status != 200 || !strings.Contains(string(r.body), `"shape":[-1,1,28,28]`) {
		t.Fatalf("v2 metadata: %d %s", r.status, r.body)
	}
}

// writeDigitsArchive writes models/out/digits/<file> into dir (a server's scratch) as a directory
// archive named name with config, then lets edit change its manifest.
func writeDigitsArchive(t testing.TB, dir, name, file, config string, edit func(*archive.Manifest)) string {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "model-config.toml")
	if err := os.WriteFile(cfg, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := archive.Write(archive.WriteOptions{ModelName: name, SerializedFile: filepath.Join(zooDir, "digits", file),
		ConfigFile: cfg, ExportPath: dir, Format: archive.FormatNoArchive, Force: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(out) })
	if edit == nil {
		return out
	}
	mp := filepath.Join(out, archive.ManifestPath)
	b, err := os.ReadFile(mp)
	if err != nil {
		t.Fatal(err)
	}
	m, err := archive.ParseManifest(b)
	if err != nil {
		t.Fatal(err)
	}
	edit(&m)
	if b, err = m.Encode(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(mp, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestPackageRegistrationRefusals registers a package with a batch size beyond its exported
// range, beyond the narrower range its archive records, and with a precision it was not
// exported in: each is a 400, and the server keeps serving.
func TestPackageRegistrationRefusals(t *testing.T) {
	s := newServer(t, 0)
	r := s.manage("POST", "/models?url=digits_pt2.mar&batch_size=65&initial_workers=1&synchronous=true")
	errorShape(t, r, 400, "ModelException", "batch_size 65 is outside the batch range [1, 64]")
	// The archive's record is what registration reads.
	writeDigitsArchive(t, s.scratch, "digits_pt2_narrow", "model.pt2", "handler = \"tensor\"\n", func(m *archive.Manifest) {
		rec := m.Model.Extensions[archive.PackageExtension].(map[string]any)
		in := rec["inputs"].([]any)[0].(map[string]any)
		in["max"].([]any)[0] = 16
	})
	r = s.manage("POST", "/models?url=digits_pt2_narrow&batch_size=32&initial_workers=1&synchronous=true")
	errorShape(t, r, 400, "ModelException", "batch_size 32 is outside the batch range [1, 16]")
	writeDigitsArchive(t, s.scratch, "digits_pt2_bf16", "model.pt2", "handler = \"tensor\"\nprecision = \"bf16\"\n", nil)
	r = s.manage("POST", "/models?url=digits_pt2_bf16&initial_workers=1&synchronous=true")
	errorShape(t, r, 400, "ModelException", "precision bf16, but model.pt2 was exported in fp32")
	writeDigitsArchive(t, s.scratch, "digits_pt2_fp16", "model.pt2", "handler = \"tensor\"\nprecision = \"fp16\"\n", nil)
	r = s.manage("POST", "/models?url=digits_pt2_fp16&initial_workers=1&synchronous=true")
	errorShape(t, r, 400, "ModelException", "precision fp16, but model.pt2 was exported in fp32")
	s.register(t, "url=digits_pt2.mar&batch_size=64&initial_workers=1&synchronous=true")
	body := `{"data": [` + strings.TrimSuffix(strings.Repeat("0.5,", 784), ",") + `], "shape": [1, 1, 28, 28]}`
	if len(tensorData(t, s.do("POST", "/predictions/digits_pt2", "application/json", []byte(body)))) != 10 {
		t.Fatal("no 10 logits after a refused registration")
	}
	// One request of more rows than the package runs at once is the client's error, over
	// KServe v2 (tensors straight to the model) and through the handler alike.
	rows := func(n int) string { return strings.TrimSuffix(strings.Repeat("0.5,", n*784), ",") }
	v2 := fmt.Sprintf(`{"inputs": [{"name": "input__0", "shape": [65, 1, 28, 28], "datatype": "FP32", "data": [%s]}]}`, rows(65))
	r = s.do("POST", "/v2/models/digits_pt2/infer", "application/json", []byte(v2))
	if r.status != 400 || !strings.Contains(string(r.body), "at most 64 rows a request") {
		t.Fatalf("v2, 65 rows: %d %s", r.status, r.body)
	}
	r = s.do("POST", "/predictions/digits_pt2", "application/json", []byte(`{"data": [`+rows(65)+`], "shape": [65, 1, 28, 28]}`))
	errorShape(t, r, 400, "BadRequestException", "at most 64 rows a request")
	v2 = fmt.Sprintf(`{"inputs": [{"name": "input__0", "shape": [64, 1, 28, 28], "datatype": "FP32", "data": [%s]}]}`, rows(64))
	if r = s.do("POST", "/v2/models/digits_pt2/infer", "application/json", []byte(v2)); r.status != 200 {
		t.Fatalf("v2, 64 rows: %d %s", r.status, r.body)
	}
}

// TestPrecisionBF16OverHTTP serves the digits CNN in bf16 as TorchScript (autocast) and as its
// package exported in bf16, from archives whose config says precision = "bf16", as
// TorchScript registered with precision=bf16, and as its package exported in fp16 (for a GPU,
// here compiled for the CPU) with precision = "fp16": each answers logits close to float32's,
// not equal to them, with the same top digit. A bf16 package registered without a precision
// is served in bf16, as the package says; one registered with precision fp32 is refused with
// a 400.
func TestPrecisionBF16OverHTTP(t *testing.T) {
	s := newServer(t, 0)
	const cfg = "handler = \"tensor\"\nbatch_size = 8\nprecision = \"bf16\"\n"
	writeDigitsArchive(t, s.scratch, "digits_bf16_ts", "model.pt", cfg, nil)
	writeDigitsArchive(t, s.scratch, "digits_bf16_pt2", "model_bf16.pt2", cfg, nil)
	writeDigitsArchive(t, s.scratch, "digits_bf16_pt2_untold", "model_bf16.pt2", "handler = \"tensor\"\nbatch_size = 8\n", nil)
	writeDigitsArchive(t, s.scratch, "digits_fp16_pt2", "model_fp16.pt2", "handler = \"tensor\"\nbatch_size = 8\nprecision = \"fp16\"\n", nil)
	s.register(t, "url=digits_tensor.mar&initial_workers=1&synchronous=true")
	rows := packageRows(t, "digits", 16)
	want := inferPackage(t, s, "digits_tensor", rows)
	// The registration's precision parameter does what the archive's config does.
	s.register(t, "url=digits_tensor.mar&model_name=digits_bf16_param&precision=bf16&initial_workers=1&synchronous=true")
	r := s.manage("POST", "/models?url=digits_tensor.mar&model_name=x&precision=fp8")
	errorShape(t, r, 400, "BadRequestException", `precision "fp8": want one of ["fp32" "bf16" "fp16" "int8"]`)
	// fp16 is a package's precision (exported in it, for a GPU), never TorchScript's.
	r = s.manage("POST", "/models?url=digits_tensor.mar&model_name=x&precision=fp16&synchronous=true")
	errorShape(t, r, 400, "ModelException", "precision fp16 is for AOTInductor packages exported in fp16")
	for _, name := range []string{"digits_bf16_ts", "digits_bf16_pt2", "digits_bf16_param", "digits_fp16_pt2", "digits_bf16_pt2_untold"} {
		if name != "digits_bf16_param" {
			s.register(t, "url="+name+"&initial_workers=1&synchronous=true")
		}
		got := inferPackage(t, s, name, rows)
		if len(got) != len(want) {
			t.Fatalf("%s: %d logits, want %d", name, len(got), len(want))
		}
		d := 0.0
		for i := range got {
			d = math.Max(d, math.Abs(float64(got[i]-want[i])))
		}
		if d == 0 || d > 0.25 {
			t.Errorf("%s: max |logit diff| %g to float32, want some and at most 0.25", name, d)
		}
		for r := range 16 {
			// The digit may differ only where float32's top two are within 2d: there the
			// rounding decides, which native and emulated bfloat16 do differently, on weights
			// that training on this CPU made.
			g, w := got[r*10:(r+1)*10], want[r*10:(r+1)*10]
			if argmax(g) != argmax(w) && topGap(w) > 2*d {
				t.Errorf("%s: row %d: digit %d in its precision, %d in float32 (float32's top two %.3g apart)", name, r, argmax(g), argmax(w), topGap(w))
			}
		}
	}
	r = s.manage("POST", "/models?url=digits_bf16_pt2_untold&model_name=at_fp32&precision=fp32&initial_workers=1&synchronous=true")
	errorShape(t, r, 400, "ModelException", "precision fp32, but model_bf16.pt2 was exported in bf16")
	// Mixed precision: the config's float32 modules are the model's, or registration is refused.
	writeDigitsArchive(t, s.scratch, "digits_bf16_ts_fc2", "model.pt", cfg+"fp32_modules = [\"fc2\"]\n", nil)
	s.register(t, "url=digits_bf16_ts_fc2&initial_workers=1&synchronous=true")
	if got := inferPackage(t, s, "digits_bf16_ts_fc2", rows); len(got) != len(want) {
		t.Fatalf("digits_bf16_ts_fc2: %d logits, want %d", len(got), len(want))
	}
	writeDigitsArchive(t, s.scratch, "digits_bf16_ts_conv3", "model.pt", cfg+"fp32_modules = [\"conv3\"]\n", nil)
	r = s.manage("POST", "/models?url=digits_bf16_ts_conv3&initial_workers=1&synchronous=true")
	errorShape(t, r, 400, "ModelException", "float32 module conv3: forward calls no submodule of that name")
}

func argmax(v []float32) int {
	best := 0
	for i := range v {
		if v[i] > v[best] {
			best = i
		}
	}
	return best
}

// topGap is how far v's largest value is above its second.
func topGap(v []float32) float64 {
	top := argmax(v)
	second := math.Inf(-1)
	for i, x := range v {
		if i != top {
			second = math.Max(second, float64(x))
		}
	}
	return float64(v[top]) - second
}
