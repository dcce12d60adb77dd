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

// dirArchive is a directory archive of files (copied) with config as its model-config.toml.
func dirArchive(t *testing.T, config string, files ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Skipf("%v: `make models-openvino` and `make models-onnx` make the zoo's IR and ONNX files", err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "model-config.toml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// bench-model on an OpenVINO IR (EfficientNet-Lite0 with the bf16 hint its archive asks for)
// and on an ONNX model (the digits CNN) measures the runtime that serves it, not LibTorch: the
// JSON names it, has every batch size's forward and the pipelined figures of each worker
// count, each with the process's CPU time per request; a precision such an archive cannot
// have is refused.
func TestBenchModelOtherRuntimes(t *testing.T) {
	zoo := filepath.Join("..", "..", "models", "out")
	ir := filepath.Join(zoo, "openvino", "efficientnet_lite0_ov", "1")
	for _, c := range []struct {
		name, archive, input, runtime, format, precision string
	}{
		{"openvino", dirArchive(t, "handler = \"image_classifier\"\nserialized_file = \"model.xml\"\nprecision = \"bf16\"\n[options]\nresize = 256\ncrop_size = 224\n",
			filepath.Join(ir, "model.xml"), filepath.Join(ir, "model.bin"), filepath.Join(zoo, "efficientnet_lite0", "index_to_name.json")),
			filepath.Join(zoo, "resnet18", "sample_640x480.jpg"), "openvino", "openvino", "bf16"},
		{"onnx", dirArchive(t, "handler = \"image_classifier\"\nserialized_file = \"model.onnx\"\n[options]\ncolor = \"gray\"\nwidth = 28\nheight = 28\nmean = [0.5]\nstd = [0.5]\n",
			filepath.Join(zoo, "onnx_digits", "model.onnx"), filepath.Join(zoo, "onnx_digits", "index_to_name.json")),
			filepath.Join(zoo, "digits", "heldout", "0000_2.png"), "onnxruntime", "onnx", "fp32"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, err := benchModel(t, "--json", "--input", c.input, "--batch-sizes", "1,3", "--rounds", "1", "--time", "1ms",
				"--threads", "2", "--workers", "1,2", c.archive)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			var r benchModelResult
			if i := strings.Index(out, "{"); i < 0 || json.NewDecoder(strings.NewReader(out[i:])).Decode(&r) != nil {
				t.Fatalf("no JSON:\n%s", out)
			}
			if r.Runtime != c.runtime || r.Format != c.format || r.Precision != c.precision || r.Threads != 2 {
				t.Errorf("runtime %q format %q precision %q threads %d, want %s %s %s 2", r.Runtime, r.Format, r.Precision, r.Threads, c.runtime, c.format, c.precision)
			}
			if len(r.Batches) != 2 || r.Batches[0].Batch != 1 || r.Batches[1].Batch != 3 {
				t.Fatalf("batches %+v", r.Batches)
			}
			for _, b := range r.Batches {
				if b.ForwardN <= 0 || b.CycleN < b.ForwardN || b.Throughput <= 0 || b.CPUPerReqN <= 0 {
					t.Errorf("batch %d: forward %d ns, cycle %d ns, %g req/s, %d CPU ns a request", b.Batch, b.ForwardN, b.CycleN, b.Throughput, b.CPUPerReqN)
				}
			}
			workers := map[int]int{}
			for _, p := range r.Pipelined {
				if p.Throughput <= 0 || p.Threads != 2/p.Workers || p.CPUPerReqN <= 0 {
					t.Errorf("pipelined %+v", p)
				}
				workers[p.Workers]++
			}
			if len(r.Pipelined) != 4 || workers[1] != 2 || workers[2] != 2 || r.SingleN <= 0 || r.Best.Throughput <= 0 {
				t.Errorf("pipelined %+v, single %d ns, best %+v", r.Pipelined, r.SingleN, r.Best)
			}
			if out, err := benchModel(t, "--input", c.input, "--precision", "int8", c.archive); err == nil || strings.Contains(err.Error(), "TorchScript") {
				t.Errorf("--precision int8 of %s: %v\n%s", c.format, err, out)
			}
		})
	}
}
