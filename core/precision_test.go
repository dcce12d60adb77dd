package core

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/torchd/torchd/archive"
)

// The flags of the CPU kinds torchd runs on, as /proc/cpuinfo names them (the ones that
// matter here, with a few beside them).
var cpuKinds = map[string]CPUFlags{
	"Sapphire Rapids (AMX)":     flags("avx2 avx512f avx512_vnni avx512_bf16 amx_tile amx_bf16 amx_int8"),
	"Cascade Lake (AVX-512)":    flags("avx2 avx512f avx512bw avx512_vnni"),
	"Skylake-SP (AVX-512 only)": flags("avx2 avx512f avx512bw"),
	"Alder Lake (AVX-VNNI)":     flags("avx2 fma avx_vnni"),
	"Haswell (AVX2 only)":       flags("avx avx2 fma"),
	"Zen 4 (AMD, AVX-512)":      flags("avx2 avx512f avx512_vnni avx512_bf16"),
	"Zen 3 (AMD, AVX2)":         flags("avx2 fma"),
	"unreadable cpuinfo":        nil,
}

func flags(s string) CPUFlags { return ParseCPUFlags("processor\t: 0\nflags\t\t: " + s + "\n") }

// auto serves int8 where the archive has it and the CPU has VNNI or AMX-INT8, else bf16 where
// it has that and the CPU AVX512-BF16 or AMX-BF16, else the serialized package; on a GPU, the
// serialized package.
func TestChoosePrecision(t *testing.T) {
	want := map[string][4]string{ // for [fp32 int8], [fp32 bf16], [fp32 int8 bf16], [fp32]
		"Sapphire Rapids (AMX)":     {"int8", "bf16", "int8", "fp32"},
		"Cascade Lake (AVX-512)":    {"int8", "fp32", "int8", "fp32"},
		"Skylake-SP (AVX-512 only)": {"fp32", "fp32", "fp32", "fp32"},
		"Alder Lake (AVX-VNNI)":     {"int8", "fp32", "int8", "fp32"},
		"Haswell (AVX2 only)":       {"fp32", "fp32", "fp32", "fp32"},
		"Zen 4 (AMD, AVX-512)":      {"int8", "bf16", "int8", "fp32"},
		"Zen 3 (AMD, AVX2)":         {"fp32", "fp32", "fp32", "fp32"},
		"unreadable cpuinfo":        {"fp32", "fp32", "fp32", "fp32"},
	}
	haves := [][]string{{"fp32", "int8"}, {"fp32", "bf16"}, {"fp32", "int8", "bf16"}, {"fp32"}}
	for cpu, f := range cpuKinds {
		for i, have := range haves {
			got, reason := ChoosePrecision(have, "cpu", f)
			if got != want[cpu][i] {
				t.Errorf("%s, packages %q: %s (%s), want %s", cpu, have, got, reason, want[cpu][i])
			}
			if got != have[0] && !strings.HasPrefix(reason, "the CPU has ") {
				t.Errorf("%s, packages %q: reason %q does not name the flag", cpu, have, reason)
			}
		}
		if got, _ := ChoosePrecision([]string{"fp16", "int8"}, "cuda:0", f); got != "fp16" {
			t.Errorf("%s, on cuda:0: %s, want the serialized package's fp16", cpu, got)
		}
		if got, _ := ChoosePrecision([]string{"bf16"}, "cpu", f); got != "bf16" {
			t.Errorf("%s, a bf16 package alone: %s", cpu, got)
		}
		if got, _ := ChoosePrecision(nil, "cpu", f); got != "fp32" {
			t.Errorf("%s, TorchScript: %s, want fp32", cpu, got)
		}
	}
	if got, reason := ChoosePrecision([]string{"fp32", "int8"}, "cpu", cpuKinds["Cascade Lake (AVX-512)"]); reason != "the CPU has avx512_vnni" {
		t.Errorf("Cascade Lake: %s because %q", got, reason)
	}
}

func TestParseCPUFlags(t *testing.T) {
	f := ParseCPUFlags("processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu avx2 avx512_vnni\nbugs\t\t: sysret_ss_attrs\n\nprocessor\t: 1\nflags\t\t: fpu\n")
	if !f["avx2"] || !f["avx512_vnni"] || f["sysret_ss_attrs"] || len(f) != 3 {
		t.Fatalf("flags %v", f)
	}
	if f := ParseCPUFlags("no such line"); f != nil {
		t.Fatalf("flags %v from text without a flags line", f)
	}
}

// resnetVariants is a directory archive of the zoo's ResNet-18 package with its int8 variant
// (make models-int8), as the store's resnet18_pt2.mar carries them.
func resnetVariants(t *testing.T) *archive.Model {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []string{"model.pt2", "model_int8.pt2", "index_to_name.json"} {
		src, err := filepath.Abs(filepath.Join(zooDir, "resnet18", f))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(src); err != nil {
			t.Fatalf("no zoo package (run make models models-int8): %v", err)
		}
		if err := os.Symlink(src, filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := os.ReadFile(filepath.Join("..", "models", "configs", "resnet18.toml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg = append([]byte("serialized_file = \"model.pt2\"\n"), cfg...)
	if err := os.WriteFile(filepath.Join(dir, archive.ConfigTOML), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	am, err := archive.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { am.Close() })
	return am
}

// An archive with variants is served in auto unless a setting says otherwise; a precision
// it has no package for is refused, naming the file it would need.
func TestSelectPrecision(t *testing.T) {
	am := resnetVariants(t)
	if got := Resolve(testDefaults, PackageSettings(am)).Precision; got != archive.PrecisionAuto {
		t.Fatalf("an archive with variants resolves to precision %q, want auto", got)
	}
	for cpu, f := range cpuKinds {
		got, _, err := selectPrecision(am, "auto", "cpu", f)
		if want := map[bool]string{true: "int8", false: "fp32"}[f["avx512_vnni"] || f["avx_vnni"] || f["amx_int8"]]; err != nil || got != want {
			t.Errorf("%s: auto serves %s (%v), want %s", cpu, got, err, want)
		}
		for _, p := range []string{"fp32", "int8"} {
			if got, reason, err := selectPrecision(am, p, "cpu", f); err != nil || got != p || reason != "" {
				t.Errorf("%s: precision %s serves %s, %q, %v", cpu, p, got, reason, err)
			}
		}
	}
	_, _, err := selectPrecision(am, "bf16", "cpu", cpuKinds["Sapphire Rapids (AMX)"])
	if err == nil || !strings.Contains(err.Error(), "precision bf16, but the archive's packages were exported in fp32, int8 only (model.pt2 and its variants); add model_bf16.pt2") {
		t.Fatalf("precision bf16 without a bf16 package: %v", err)
	}
}

// Registered with precision int8 or fp32, the version loads that package and says so; one it
// has no package for fails registration and leaves the name free.
func TestLoadVariant(t *testing.T) {
	r := testRegistry(t, 0)
	_, err := r.Add("m", "1", RegisterRequest{Synchronous: true, Settings: archive.Settings{Precision: archive.Of("fp16")}}, resnetVariants(t))
	errorContains(t, "precision fp16", err, ErrBadModel, "add model_fp16.pt2")
	for _, p := range []string{"int8", "fp32"} {
		v, err := r.Add("m_"+p, "1", RegisterRequest{Synchronous: true, Settings: archive.Settings{Precision: archive.Of(p)}}, resnetVariants(t))
		if err != nil {
			t.Fatal(err)
		}
		if got := v.Settings().Precision; got != p {
			t.Errorf("registered with precision %s, serves %s", p, got)
		}
	}
}
