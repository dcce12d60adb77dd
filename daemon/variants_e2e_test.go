package daemon_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/internal/tolerance"
)

// resnetAuto is the precision auto serves resnet18_pt2 in on this CPU, read from its flags
// here rather than through core's rule; it skips the test without the int8 package.
func resnetAuto(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat(filepath.Join(zooDir, "resnet18", "model_int8.pt2")); err != nil {
		t.Skip("no int8 package: `make models-int8` makes models/out/resnet18/model_int8.pt2")
	}
	cpuinfo, _ := os.ReadFile("/proc/cpuinfo")
	flags := core.ParseCPUFlags(string(cpuinfo))
	if flags["avx512_vnni"] || flags["avx_vnni"] || flags["amx_int8"] {
		return "int8"
	}
	return "fp32"
}

// TestPrecisionVariantsOverHTTP registers the store's resnet18_pt2, which carries ResNet-18's
// int8 package beside its fp32 one as make archives builds it, over the management API. With
// no precision given it serves auto: int8 where the CPU computes it natively (VNNI, AMX-INT8),
// else fp32, as describe says, and either way a photo gets five ImageNet labels.
// precision=fp32 serves the fp32 package, whose answers equal eager PyTorch's; int8 serves
// the variant on any CPU; bf16, which the archive has no package for, is refused.
func TestPrecisionVariantsOverHTTP(t *testing.T) {
	auto := resnetAuto(t)
	s := startServer(t)
	precision := func(name string) string {
		var desc []struct {
			Runtime   string `json:"runtime"`
			Precision string `json:"precision"`
		}
		do(t, "GET", s.mgmt+"/models/"+name, "", nil).json(t, &desc)
		if len(desc) != 1 || desc[0].Runtime != "aoti" {
			t.Fatalf("describe %s: %+v", name, desc)
		}
		return desc[0].Precision
	}
	var labels map[string]string
	classes := map[string]bool{}
	b, err := os.ReadFile(filepath.Join(zooDir, "resnet18", "index_to_name.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &labels); err != nil {
		t.Fatal(err)
	}
	for _, l := range labels {
		classes[l] = true
	}
	photo, err := os.ReadFile(filepath.Join(zooDir, "resnet18", "sample_640x480.jpg"))
	if err != nil {
		t.Fatal(err)
	}

	s.register(t, "url=pt2/resnet18_pt2.mar&model_name=auto&initial_workers=1&synchronous=true")
	if got := precision("auto"); got != auto {
		t.Errorf("precision auto serves %s on this CPU, want %s", got, auto)
	}
	if !strings.Contains(s.Log(), "msg=\"precision auto\"") {
		t.Errorf("the load log does not say which package auto chose:\n%s", s.Log())
	}
	for _, name := range []string{"auto", "fp32", "int8"} {
		if name != "auto" {
			s.register(t, "url=pt2/resnet18_pt2.mar&model_name="+name+"&precision="+name+"&initial_workers=1&synchronous=true")
			if got := precision(name); got != name {
				t.Errorf("registered with precision=%s, describe says %s", name, got)
			}
		}
		r := do(t, "POST", s.inf+"/predictions/"+name, "image/jpeg", photo)
		var top map[string]float64
		r.json(t, &top)
		if r.status != 200 || len(top) != 5 {
			t.Fatalf("%s: %d %s, want five labels", name, r.status, r.body)
		}
		for label := range top {
			if !classes[label] {
				t.Errorf("%s: label %q is not an ImageNet class", name, label)
			}
		}
	}
	for _, n := range []int{1, 7} {
		got := inferPackage(t, s, "fp32", packageRows(t, "resnet18", n))
		closeTo(t, "precision=fp32", got, f32s(readZooNpy(t, "resnet18", fmt.Sprintf("pt2_ref_output_b%d.npy", n)).Data), tolerance.Kernels)
	}
	r := do(t, "POST", s.mgmt+"/models?url=pt2/resnet18_pt2.mar&model_name=bf16&precision=bf16&synchronous=true", "", nil)
	errorShape(t, r, 400, "ModelException", "precision bf16, but the archive's packages were exported in fp32, int8 only (model.pt2 and its variants); add model_bf16.pt2")
	r = do(t, "POST", s.mgmt+"/models?url=pt2/resnet18_pt2.mar&model_name=x&precision=fastest", "", nil)
	errorShape(t, r, 400, "BadRequestException", `want one of ["fp32" "bf16" "fp16" "int8"] or "auto"`)

	// A variant that is not what its name says fails the registration, naming the file;
	// the models registered before it still answer.
	wrong := filepath.Join(t.TempDir(), "model_int8.pt2")
	bf16, err := filepath.Abs(filepath.Join(zooDir, "digits", "model_bf16.pt2"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(bf16, wrong); err != nil {
		t.Fatal(err)
	}
	out, err := archive.Write(archive.WriteOptions{ModelName: "digits_wrong_variant", SerializedFile: filepath.Join(zooDir, "digits", "model.pt2"),
		ExtraFiles: []string{wrong}, ConfigFile: filepath.Join("..", "models", "configs", "digits_tensor.toml"),
		ExportPath: filepath.Join(store, "pt2"), Format: archive.FormatNoArchive, Force: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(out) })
	r = do(t, "POST", s.mgmt+"/models?url=pt2/digits_wrong_variant&synchronous=true", "", nil)
	errorShape(t, r, 400, "", "variant model_int8.pt2 was exported in bf16 (its torchd.precision), not the int8 its name says")
	if r := do(t, "POST", s.inf+"/predictions/auto", "image/jpeg", photo); r.status != 200 {
		t.Errorf("after the refused registration: %d %s", r.status, r.body)
	}
}

// TestBenchModelPrecision runs torchd bench-model on the store's resnet18_pt2: without
// --precision it measures the package the daemon would serve (auto), --precision fp32 the
// serialized one, and a precision the archive lacks is refused.
func TestBenchModelPrecision(t *testing.T) {
	auto := resnetAuto(t)
	mar := filepath.Join(store, "pt2", "resnet18_pt2.mar")
	photo := filepath.Join(zooDir, "resnet18", "sample_640x480.jpg")
	for _, c := range []struct{ flag, want string }{{"", auto}, {"auto", auto}, {"fp32", "fp32"}} {
		args := []string{"bench-model", "--json", "--input", photo, "--batch-sizes", "1", "--rounds", "1", "--time", "1ms", "--workers", "1"}
		if c.flag != "" {
			args = append(args, "--precision", c.flag)
		}
		out, err := runTorchd(t, append(args, mar)...)
		if err != nil {
			t.Fatalf("--precision %q: %v\n%s", c.flag, err, out)
		}
		var r struct {
			Precision string `json:"precision"`
		}
		if i := strings.Index(out, "{"); i < 0 || json.NewDecoder(strings.NewReader(out[i:])).Decode(&r) != nil || r.Precision != c.want {
			t.Errorf("--precision %q: measured %q, want %s\n%s", c.flag, r.Precision, c.want, out)
		}
	}
	out, err := runTorchd(t, "bench-model", "--input", photo, "--precision", "bf16", mar)
	if err == nil || !strings.Contains(out, "add model_bf16.pt2") {
		t.Errorf("--precision bf16 without a bf16 package: %v\n%s", err, out)
	}
}
