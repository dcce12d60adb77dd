package libtorch_test

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
func resnetAuto(t testing.TB) string {
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
	s := newServer(t, 0)
	precision := func(name string) string {
		var desc []struct {
			Runtime   string `json:"runtime"`
			Precision string `json:"precision"`
		}
		s.manage("GET", "/models/"+name).json(t, &desc)
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

	s.register(t, "url=resnet18_pt2.mar&model_name=auto&initial_workers=1&synchronous=true")
	if got := precision("auto"); got != auto {
		t.Errorf("precision auto serves %s on this CPU, want %s", got, auto)
	}
	if !strings.Contains(s.Log(), "msg=\"precision auto\"") {
		t.Errorf("the load log does not say which package auto chose:\n%s", s.Log())
	}
	for _, name := range []string{"auto", "fp32", "int8"} {
		if name != "auto" {
			s.register(t, "url=resnet18_pt2.mar&model_name="+name+"&precision="+name+"&initial_workers=1&synchronous=true")
			if got := precision(name); got != name {
				t.Errorf("registered with precision=%s, describe says %s", name, got)
			}
		}
		r := s.do("POST", "/predictions/"+name, "image/jpeg", photo)
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
	r := s.manage("POST", "/models?url=resnet18_pt2.mar&model_name=bf16&precision=bf16&synchronous=true")
	errorShape(t, r, 400, "ModelException", "precision bf16, but the archive's packages were exported in fp32, int8 only (model.pt2 and its variants); add model_bf16.pt2")
	r = s.manage("POST", "/models?url=resnet18_pt2.mar&model_name=x&precision=fastest")
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
		ExtraFiles: []string{wrong}, ConfigFile: filepath.Join("..", "..", "models", "configs", "digits_tensor.toml"),
		ExportPath: s.scratch, Format: archive.FormatNoArchive, Force: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(out) })
	r = s.manage("POST", "/models?url=digits_wrong_variant&synchronous=true")
	errorShape(t, r, 400, "", "variant model_int8.pt2 was exported in bf16 (its torchd.precision), not the int8 its name says")
	if r := s.do("POST", "/predictions/auto", "image/jpeg", photo); r.status != 200 {
		t.Errorf("after the refused registration: %d %s", r.status, r.body)
	}
}
