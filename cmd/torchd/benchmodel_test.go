package main

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/core"
)

// benchModel runs torchd bench-model with args in this process and returns what it printed.
func benchModel(t *testing.T, args ...string) (string, error) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = w
	out := make(chan string)
	go func() { b, _ := io.ReadAll(r); out <- string(b) }()
	err = runBenchModel(args)
	os.Stdout = stdout
	w.Close()
	return <-out, err
}

// bench-model on resnet18_pt2 as make archives builds it (the fp32 package with its int8
// variant): without --precision it measures the package the daemon would serve (auto: int8
// where the CPU computes it natively, else fp32), --precision fp32 the serialized one, and a
// precision the archive lacks is refused. It measures with freed memory kept, as the daemon runs.
func TestBenchModelPrecision(t *testing.T) {
	zoo := filepath.Join("..", "..", "models", "out", "resnet18")
	if _, err := os.Stat(filepath.Join(zoo, "model_int8.pt2")); err != nil {
		t.Skip("no int8 package: `make models-int8` makes models/out/resnet18/model_int8.pt2")
	}
	auto := "fp32"
	cpuinfo, _ := os.ReadFile("/proc/cpuinfo")
	if flags := core.ParseCPUFlags(string(cpuinfo)); flags["avx512_vnni"] || flags["avx_vnni"] || flags["amx_int8"] {
		auto = "int8"
	}
	mar, err := archive.Write(archive.WriteOptions{ModelName: "resnet18_pt2", Version: "1.0", SerializedFile: filepath.Join(zoo, "model.pt2"),
		ExtraFiles: []string{filepath.Join(zoo, "index_to_name.json"), filepath.Join(zoo, "model_int8.pt2")},
		ConfigFile: filepath.Join("..", "..", "models", "configs", "resnet18.toml"), ExportPath: t.TempDir(), Format: archive.FormatZipStore})
	if err != nil {
		t.Fatal(err)
	}
	photo := filepath.Join(zoo, "sample_640x480.jpg")
	for _, c := range []struct{ flag, want string }{{"", auto}, {"auto", auto}, {"fp32", "fp32"}} {
		args := []string{"--json", "--input", photo, "--batch-sizes", "1", "--rounds", "1", "--time", "1ms", "--workers", "1"}
		if c.flag != "" {
			args = append(args, "--precision", c.flag)
		}
		out, err := benchModel(t, append(args, mar)...)
		if err != nil {
			t.Fatalf("--precision %q: %v\n%s", c.flag, err, out)
		}
		var r struct {
			Precision string `json:"precision"`
			KeepFreed bool   `json:"keep_freed_memory"`
		}
		if i := strings.Index(out, "{"); i < 0 || json.NewDecoder(strings.NewReader(out[i:])).Decode(&r) != nil || r.Precision != c.want {
			t.Errorf("--precision %q: measured %q, want %s\n%s", c.flag, r.Precision, c.want, out)
		}
		// As the daemon runs (keep_freed_memory's default); glibc is what the project builds on.
		if !r.KeepFreed {
			t.Errorf("--precision %q: measured without keeping freed memory, as the daemon does not run", c.flag)
		}
	}
	out, err := benchModel(t, "--input", photo, "--precision", "bf16", mar)
	if err == nil || !strings.Contains(err.Error(), "add model_bf16.pt2") {
		t.Errorf("--precision bf16 without a bf16 package: %v\n%s", err, out)
	}
}
