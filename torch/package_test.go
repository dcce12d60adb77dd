package torch_test

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/torchd/torchd/internal/npy"
	"github.com/torchd/torchd/internal/tolerance"
	"github.com/torchd/torchd/torch"
)

// zooPackages are the packages models/pt2.py exports, with their batch max: each model's
// model.pt2, and the captioner's encoder alone (encoder.pt2, images to features).
var zooPackages = []struct {
	name, file string
	batchMax   int64
}{
	{"digits", "model.pt2", 64}, {"resnet18", "model.pt2", 32}, {"efficientnet_lite0", "model.pt2", 32},
	{"textcls", "model.pt2", 64}, {"minilm", "model.pt2", 64}, {"captioner", "encoder.pt2", 64},
}

// packageInputs returns batch n of a zoo package's reference inputs: the first n rows, for a
// text model (token ids and attention mask) trimmed to the longest of them.
func packageInputs(t *testing.T, name string, n int64) []any {
	t.Helper()
	if _, err := os.Stat(filepath.Join("..", "models", "out", name, "pt2_ref_input.npy")); err == nil {
		in := readNpy(t, zoo(t, name, "pt2_ref_input.npy"))
		row := len(in.Data) / int(in.Shape[0])
		x, err := torch.FromBytes(torch.Float32, in.Data[:int(n)*row], append([]int64{n}, in.Shape[1:]...)...)
		if err != nil {
			t.Fatal(err)
		}
		return []any{x}
	}
	ids, mask := readNpy(t, zoo(t, name, "pt2_ref_input_ids.npy")), readNpy(t, zoo(t, name, "pt2_ref_attention_mask.npy"))
	width := int(ids.Shape[1])
	int64s := func(b []byte) []int64 {
		v := make([]int64, len(b)/8)
		for i := range v {
			v[i] = int64(binary.LittleEndian.Uint64(b[8*i:]))
		}
		return v
	}
	m := int64s(mask.Data)
	longest := 0
	for i := range int(n) {
		k := 0
		for _, v := range m[i*width : (i+1)*width] {
			k += int(v)
		}
		longest = max(longest, k)
	}
	var args []any
	for _, a := range []npy.Array{ids, mask} {
		v := int64s(a.Data)
		rows := make([]int64, 0, int(n)*longest)
		for i := range int(n) {
			rows = append(rows, v[i*width:i*width+longest]...)
		}
		args = append(args, mustTensor(t, rows, n, int64(longest)))
	}
	return args
}

// realTokens keeps the rows of x, token embeddings [N, L, H], whose attention mask [N, L] is 1.
func realTokens(t *testing.T, mask *torch.Tensor, x []float32) []float32 {
	t.Helper()
	m, err := torch.Data[int64](mask)
	if err != nil {
		t.Fatal(err)
	}
	h := len(x) / len(m)
	var out []float32
	for i, v := range m {
		if v != 0 {
			out = append(out, x[i*h:(i+1)*h]...)
		}
	}
	return out
}

// TestPackagesMatchEager runs each zoo package at batch sizes 1, 2, 7 and its exported max,
// one package for all of them, against eager PyTorch's outputs for the same rows.
func TestPackagesMatchEager(t *testing.T) {
	for _, m := range zooPackages {
		t.Run(m.name, func(t *testing.T) {
			p, err := torch.LoadPackage(zoo(t, m.name, m.file), torch.WithPackageDevice(testDevice()))
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			if lo, hi := p.BatchRange(); lo != 1 || hi != m.batchMax {
				t.Fatalf("batch range [%d, %d], want [1, %d]", lo, hi, m.batchMax)
			}
			for _, n := range []int64{1, 2, 7, m.batchMax} {
				args := packageInputs(t, m.name, n)
				out, err := p.Forward(args...)
				if err != nil {
					t.Fatalf("batch %d: %v", n, err)
				}
				got := float32s(t, out)
				want := npyFloat32s(readNpy(t, zoo(t, m.name, fmt.Sprintf("pt2_ref_output_b%d.npy", n))))
				if len(args) == 2 && len(got) != len(want) {
					t.Fatalf("batch %d: %d outputs, want %d", n, len(got), len(want))
				}
				if shape := out.(*torch.Tensor).Shape(); len(shape) == 3 {
					// Token embeddings: the ones of padding are no one's output.
					got, want = realTokens(t, args[1].(*torch.Tensor), got), realTokens(t, args[1].(*torch.Tensor), want)
				}
				if d := maxAbsDiff(got, want); d > tolerance.Kernels {
					t.Errorf("batch %d: max |diff| %g from eager PyTorch, want <= %g", n, d, tolerance.Kernels)
				}
				torch.CloseValue(out)
			}
		})
	}
}

func digitsPackage(t *testing.T, opts ...torch.PackageOption) *torch.Package {
	t.Helper()
	p, err := torch.LoadPackage(zoo(t, "digits", "model.pt2"), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// TestPackageRefusesBadInputs sends inputs the compiled code would read out of bounds on:
// each must be an error before the call crosses into C.
func TestPackageRefusesBadInputs(t *testing.T) {
	p := digitsPackage(t)
	f32 := func(shape ...int64) *torch.Tensor {
		n := int64(1)
		for _, d := range shape {
			n *= d
		}
		return mustTensor(t, make([]float32, n), shape...)
	}
	cases := []struct {
		name string
		args []any
		want string
	}{
		{"batch over the exported max", []any{f32(65, 1, 28, 28)}, "outside the exported range [1, 64]"},
		{"empty batch", []any{f32(0, 1, 28, 28)}, "outside the exported range [1, 64]"},
		{"wrong image size", []any{f32(2, 1, 32, 32)}, "want [-1 1 28 28]"},
		{"wrong rank", []any{f32(2, 28, 28)}, "want rank 4"},
		{"wrong dtype", []any{mustTensor(t, make([]float64, 784), 1, 1, 28, 28)}, "is float64, not float32"},
		{"two inputs", []any{f32(1, 1, 28, 28), f32(1, 1, 28, 28)}, "takes 1 inputs, got 2"},
		{"not a tensor", []any{int64(3)}, "takes tensors only"},
	}
	for _, c := range cases {
		_, err := p.Forward(c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", c.name, err, c.want)
		}
	}
	// The package still runs after every refusal.
	out, err := p.Forward(f32(3, 1, 28, 28))
	if err != nil {
		t.Fatal(err)
	}
	torch.CloseValue(out)
}

// rewritePackage copies the package at src to a new file in t's temp dir, passing each
// entry through edit (which may change its bytes; nil drops it).
func rewritePackage(t *testing.T, src string, edit func(name string, b []byte) []byte) string {
	t.Helper()
	r, err := zip.OpenReader(src)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	dst := filepath.Join(t.TempDir(), "edited.pt2")
	var buf bytes.Buffer
	w := zip.NewWriter(&buf)
	for _, f := range r.File {
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		if b = edit(f.Name, b); b == nil {
			continue
		}
		fw, err := w.CreateHeader(&zip.FileHeader{Name: f.Name, Method: zip.Store})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fw.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return dst
}

// editMetadata sets (or, for "", deletes) metadata keys in every metadata file of a package.
func editMetadata(t *testing.T, src string, set map[string]string) string {
	return rewritePackage(t, src, func(name string, b []byte) []byte {
		if !strings.HasSuffix(name, "_metadata.json") {
			return b
		}
		md := map[string]string{}
		if err := json.Unmarshal(b, &md); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for k, v := range set {
			if v == "" {
				delete(md, k)
			} else {
				md[k] = v
			}
		}
		out, err := json.Marshal(md)
		if err != nil {
			t.Fatal(err)
		}
		return out
	})
}

func hostHasFlag(flag string) bool {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for line := range strings.SplitSeq(string(b), "\n") {
		if strings.HasPrefix(line, "flags") {
			return strings.Contains(line+" ", " "+flag+" ")
		}
	}
	return false
}

// TestBadPackages loads broken and foreign packages: each is an error naming the cause, and
// the process (and a package loaded before) carries on.
func TestBadPackages(t *testing.T) {
	good := zoo(t, "digits", "model.pt2")
	before := digitsPackage(t)
	dir := t.TempDir()
	corrupt := filepath.Join(dir, "corrupt.pt2")
	if err := os.WriteFile(corrupt, bytes.Repeat([]byte("not a zip "), 100), 0o644); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	truncated := filepath.Join(dir, "truncated.pt2")
	if err := os.WriteFile(truncated, raw[:len(raw)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	// A library the package needs that no machine has: the same-length name keeps the ELF
	// string table intact.
	missingLib := rewritePackage(t, good, func(name string, b []byte) []byte {
		if strings.HasSuffix(name, ".so") {
			return bytes.ReplaceAll(b, []byte("libgomp.so.1\x00"), []byte("libgomq.so.1\x00"))
		}
		return b
	})
	cases := []struct {
		name, path string
		opts       []torch.PackageOption
		want       string
	}{
		{"missing file", filepath.Join(dir, "none.pt2"), nil, "no such file"},
		{"corrupt", corrupt, nil, "package metadata"},
		{"truncated", truncated, nil, "package metadata"},
		{"no torchd specs", editMetadata(t, good, map[string]string{torch.MetaInputs: ""}), nil, `no "torchd.inputs" metadata`},
		{"bad torchd specs", editMetadata(t, good, map[string]string{torch.MetaInputs: `[{"name":"x","dtype":"float32","shape":[-1,3],"min":[1,3],"max":[0,3]}]`}), nil, "has bounds [1, 0]"},
		{"compiled for cuda", editMetadata(t, good, map[string]string{"AOTI_DEVICE_KEY": "cuda"}), nil, "compiled for device cuda, not for cpu"},
		{"unknown CPU capability", editMetadata(t, good, map[string]string{"AOTI_CPU_ISA": "SVE256"}), nil, "does not know how to check"},
		{"missing library", missingLib, nil, "libgomq.so.1"},
		{"no such model", good, []torch.PackageOption{torch.WithModelName("other")}, "other"},
		{"zero runners", good, []torch.PackageOption{torch.WithRunners(0)}, "num_runners"},
		{"unknown device", good, []torch.PackageOption{torch.WithPackageDevice("tpu")}, "tpu"},
	}
	if !hostHasFlag("amx_tile") {
		cases = append(cases, struct {
			name, path string
			opts       []torch.PackageOption
			want       string
		}{"CPU capability the host lacks", editMetadata(t, good, map[string]string{"AOTI_CPU_ISA": "AMX"}), nil, "compiled for CPU capability AMX (AOTI_CPU_ISA), but this CPU lacks"})
	}
	if !hostHasFlag("avx512f") {
		cases = append(cases, struct {
			name, path string
			opts       []torch.PackageOption
			want       string
		}{"AVX-512 package", editMetadata(t, good, map[string]string{"AOTI_CPU_ISA": "AVX512"}), nil, "this CPU lacks avx512f"})
	}
	for _, c := range cases {
		p, err := torch.LoadPackage(c.path, c.opts...)
		if err == nil {
			p.Close()
			t.Errorf("%s: loaded, want an error containing %q", c.name, c.want)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error containing %q", c.name, err, c.want)
		}
		t.Logf("%s: %v", c.name, err)
	}
	out, err := before.Forward(mustTensor(t, make([]float32, 784), 1, 1, 28, 28))
	if err != nil {
		t.Fatalf("a package loaded before the bad ones: %v", err)
	}
	torch.CloseValue(out)
}

// TestPackageConcurrentRunners runs more goroutines than runners on one package: the extra
// calls wait for a runner, and every result equals the one-by-one result.
func TestPackageConcurrentRunners(t *testing.T) {
	p := digitsPackage(t, torch.WithRunners(2))
	in := readNpy(t, zoo(t, "digits", "pt2_ref_input.npy"))
	want := npyFloat32s(readNpy(t, zoo(t, "digits", "pt2_ref_output_b7.npy")))
	row := len(in.Data) / int(in.Shape[0])
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	for range 6 {
		wg.Go(func() {
			for range 5 {
				x, err := torch.FromBytes(torch.Float32, in.Data[:7*row], 7, 1, 28, 28)
				if err != nil {
					errs <- err
					return
				}
				out, err := p.Forward(x)
				if err != nil {
					errs <- err
					return
				}
				got, _ := out.(*torch.Tensor)
				d, _ := torch.Data[float32](got)
				if diff := maxAbsDiff(d, want); diff > tolerance.Kernels {
					errs <- fmt.Errorf("concurrent result differs by %g", diff)
				}
				torch.CloseValue(out)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestConcurrentPackageLoads loads several packages at once, some the same file under other
// names, while their metadata is read beside: LibTorch's loader parses every package's JSON
// into one static object, which crashed such loads (or could give one package another's
// metadata) before the C ABI made them take turns. Each package must keep its own metadata.
func TestConcurrentPackageLoads(t *testing.T) {
	dir := t.TempDir()
	var paths []string
	for i := range 3 {
		b, err := os.ReadFile(zoo(t, "digits", "model.pt2"))
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, fmt.Sprintf("digits%d.pt2", i))
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	paths = append(paths, zoo(t, "textcls", "model.pt2"), zoo(t, "minilm", "model.pt2"))
	want := map[string]map[string]string{}
	for _, p := range paths {
		md, err := torch.ReadPackageMetadata(p, "")
		if err != nil {
			t.Fatal(err)
		}
		want[p] = md
	}
	for range 30 {
		var wg sync.WaitGroup
		for _, p := range paths {
			wg.Go(func() {
				pk, err := torch.LoadPackage(p)
				if err != nil {
					t.Errorf("%s: %v", filepath.Base(p), err)
					return
				}
				defer pk.Close()
				if got := pk.Metadata(); !maps.Equal(got, want[p]) {
					t.Errorf("%s: metadata %v, want %v", filepath.Base(p), got, want[p])
				}
			})
			wg.Go(func() {
				if md, err := torch.ReadPackageMetadata(p, ""); err != nil || !maps.Equal(md, want[p]) {
					t.Errorf("%s: metadata read beside the loads: %v, %v", filepath.Base(p), md, err)
				}
			})
		}
		wg.Wait()
	}
}
