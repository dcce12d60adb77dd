package core

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/torchd/torchd/archive"
)

// CPUFlags are the feature flags of the host's CPU, as /proc/cpuinfo's "flags" line names
// them (avx512_vnni, amx_int8, ...); nil where that cannot be read.
type CPUFlags map[string]bool

// ParseCPUFlags reads the first "flags" line of /proc/cpuinfo's text.
func ParseCPUFlags(cpuinfo string) CPUFlags {
	for line := range strings.SplitSeq(cpuinfo, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "flags" {
			f := CPUFlags{}
			for _, name := range strings.Fields(v) {
				f[name] = true
			}
			return f
		}
	}
	return nil
}

// HostCPUFlags are this machine's CPU flags, read once.
var HostCPUFlags = sync.OnceValue(func() CPUFlags {
	b, _ := os.ReadFile("/proc/cpuinfo")
	return ParseCPUFlags(string(b))
})

// The flags under which a CPU computes each precision natively, fastest first: int8 dot
// products (VNNI, AMX tiles) and bfloat16 ones. fp32 needs none.
var nativeFlags = []struct {
	precision string
	flags     []string
}{
	{"int8", []string{"amx_int8", "avx512_vnni", "avx_vnni"}},
	{"bf16", []string{"amx_bf16", "avx512_bf16"}},
}

// has reports the first of names the CPU has, if any.
func (f CPUFlags) has(names []string) (string, bool) {
	for _, n := range names {
		if f[n] {
			return n, true
		}
	}
	return "", false
}

// ChoosePrecision is what precision "auto" serves of packages exported in have (the
// serialized package's precision first): on a CPU, int8 where there is an int8 package and the
// CPU has VNNI or AMX-INT8, else bf16 where there is a bf16 one and the CPU has AVX512-BF16 or
// AMX-BF16, else the serialized package's. On a GPU, the serialized package's: which variant
// wins there depends on the card, and the archive's author named the main file for it. The
// reason says why, for the load log.
func ChoosePrecision(have []string, device string, flags CPUFlags) (precision, reason string) {
	if len(have) == 0 {
		return "fp32", "not a package"
	}
	if strings.HasPrefix(device, "cuda") {
		return have[0], "the serialized package, on " + device
	}
	for _, n := range nativeFlags {
		if !slices.Contains(have, n.precision) {
			continue
		}
		if flag, ok := flags.has(n.flags); ok {
			return n.precision, "the CPU has " + flag
		}
	}
	if len(have) == 1 {
		return have[0], "the archive has no other precision"
	}
	return have[0], "the CPU computes none of the variants natively (" + strings.Join(have[1:], ", ") + ")"
}

// selectPrecision settles the precision a version serves: "auto" chosen for the host
// (ChoosePrecision), or the one asked for, which the archive must have a package for.
// reason is set when auto chose.
func selectPrecision(am *archive.Model, precision, device string, flags CPUFlags) (chosen, reason string, err error) {
	if precision == archive.PrecisionAuto {
		chosen, reason = ChoosePrecision(am.PackagePrecisions(), device, flags)
		return chosen, reason, nil
	}
	return precision, "", checkPrecision(am, precision)
}

// checkPrecision refuses a precision the archive has no package for: a package's precision is
// compiled in. TorchScript runs in fp32 or, under autocast, bf16.
func checkPrecision(am *archive.Model, precision string) error {
	if am.Package == nil && (precision == "fp16" || precision == "int8") {
		// An IR or ONNX model is in the precision its file holds (an int8 IR is quantized in it).
		what := "TorchScript, which runs in fp32 or bf16"
		if !archive.IsTorchName(am.SerializedFile) {
			what = "not a package: it runs in the precision its file holds"
		}
		return fmt.Errorf("precision %s is for AOTInductor packages exported in %s (models/pt2.py --dtype %s); %s is %s",
			precision, precision, precision, filepath.Base(am.SerializedPath()), what)
	}
	if am.Package == nil {
		return nil
	}
	if _, _, ok := am.PackageFor(precision); ok {
		return nil
	}
	if len(am.Variants) == 0 {
		return fmt.Errorf("precision %s, but %s was exported in %s; export it in %s (models/pt2.py --dtype, docs/guide/pt2.md) or serve it with precision = %q",
			precision, filepath.Base(am.SerializedPath()), am.Package.Precision, precision, am.Package.Precision)
	}
	return fmt.Errorf("precision %s, but the archive's packages were exported in %s only (%s and its variants); add %s or serve one of those (docs/guide/pt2.md)",
		precision, strings.Join(am.PackagePrecisions(), ", "), filepath.Base(am.SerializedPath()), variantName(am.SerializedFile, precision))
}

// variantName is the file name a variant of serialized in precision has.
func variantName(serialized, precision string) string {
	base := filepath.Base(serialized)
	return strings.TrimSuffix(base, filepath.Ext(base)) + "_" + precision + filepath.Ext(base)
}

// cpuHasBF16 reports whether this CPU computes in bfloat16 natively (Linux x86).
func cpuHasBF16() bool {
	for _, n := range nativeFlags {
		if n.precision == "bf16" {
			_, ok := HostCPUFlags().has(n.flags)
			return ok
		}
	}
	return false
}

// ServedPrecision is the precision a load of am with the precision setting serves on device
// of this host, and, where "auto" chose it, why; an error where the archive has no package in
// the precision asked for.
func ServedPrecision(am *archive.Model, precision, device string) (chosen, reason string, err error) {
	return selectPrecision(am, precision, device, HostCPUFlags())
}
