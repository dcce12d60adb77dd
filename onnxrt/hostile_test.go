package onnxrt_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/torchd/torchd/onnxrt"
)

// TestHostileModelsRefused loads each of models/onnx_zoo.py's hostile files: each is refused
// with an error wrapping ErrBadModel that says why, and the process goes on serving. ONNX
// Runtime 1.31 checks all of these itself, before allocating an initializer: a declared size
// over 2 GiB inline, one that disagrees with its data, or whose product overflows, and external
// data that is absolute, leaves the model's folder, or runs past its file (models/onnx_zoo.py
// made each; Python's onnxruntime peaked at 54 MB on them).
func TestHostileModelsRefused(t *testing.T) {
	for _, tc := range []struct{ file, message string }{
		{"truncated.onnx", "Protobuf parsing failed"},
		{"huge_initializer.onnx", "Invalid TensorProto"},
		{"huge_external.onnx", "Invalid TensorProto"},
		{"short_initializer.onnx", "raw_data size (16 bytes) does not match expected size from shape and data type (1073741824 bytes)"},
		{"empty_initializer.onnx", "data field count (0) does not match expected count from shape (268435456)"},
		{"parent_external.onnx", "External data path escapes model directory"},
		{"absolute_external.onnx", "Absolute path not allowed for external data location"},
	} {
		_, err := onnxrt.NewSession(zoo(t, "hostile", tc.file), onnxrt.Options{})
		if !errors.Is(err, onnxrt.ErrBadModel) || !strings.Contains(err.Error(), tc.message) {
			t.Errorf("%s: %v, want ErrBadModel with %q", tc.file, err, tc.message)
		} else {
			t.Logf("%s: %v", tc.file, err)
		}
		assertNoGoTypeNames(t, err)
	}
	checkServing(t)
}

// TestHostileModelsMadeHere covers what the zoo's files do not: a model file that is a
// folder, missing, empty or not protobuf, and external data through a symbolic link beside
// the model that points outside its folder (ONNX Runtime resolves the link and refuses it).
func TestHostileModelsMadeHere(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name    string
		setup   func() string
		message string
	}{
		{"a folder", func() string { return dir }, "no model file"},
		{"missing", func() string { return filepath.Join(dir, "none.onnx") }, "no model file"},
		{"empty", func() string {
			p := filepath.Join(dir, "empty.onnx")
			os.WriteFile(p, nil, 0o644)
			return p
		}, "Load model"},
		{"not protobuf", func() string {
			p := filepath.Join(dir, "text.onnx")
			os.WriteFile(p, []byte("this is not a model\n"), 0o644)
			return p
		}, "Protobuf parsing failed"},
		{"external data by a link out of its folder", func() string {
			sub := filepath.Join(dir, "linked")
			os.MkdirAll(sub, 0o755)
			src, err := os.ReadFile(zoo(t, "external", "model.onnx"))
			if err != nil {
				t.Fatal(err)
			}
			os.WriteFile(filepath.Join(sub, "model.onnx"), src, 0o644)
			data, _ := filepath.Abs(zoo(t, "external", "model.onnx.data"))
			outside := filepath.Join(dir, "outside.data")
			b, _ := os.ReadFile(data)
			os.WriteFile(outside, b, 0o644)
			if err := os.Symlink(outside, filepath.Join(sub, "model.onnx.data")); err != nil {
				t.Fatal(err)
			}
			return filepath.Join(sub, "model.onnx")
		}, "escapes model directory"},
	} {
		s, err := onnxrt.NewSession(tc.setup(), onnxrt.Options{})
		if err == nil {
			s.Close()
		}
		if !errors.Is(err, onnxrt.ErrBadModel) || !strings.Contains(err.Error(), tc.message) {
			t.Errorf("%s: %v, want ErrBadModel with %q", tc.name, err, tc.message)
		} else {
			t.Logf("%s: %v", tc.name, err)
		}
		assertNoGoTypeNames(t, err)
	}
	checkServing(t)
}

// TestHugeDeclaredInput loads a model whose input is declared [2^40, 2^40]: a declaration
// allocates nothing, and a tensor of that shape is refused before anything is allocated.
func TestHugeDeclaredInput(t *testing.T) {
	s := open(t, zoo(t, "hostile", "huge_input.onnx"), onnxrt.Options{})
	in := s.Inputs()[0]
	if in.Shape[0] != 1<<40 || in.Shape[1] != 1<<40 {
		t.Fatalf("declared shape %v", in.Shape)
	}
	_, err := s.Run([]string{"in"}, []onnxrt.Value{{Type: onnxrt.Float32, Shape: in.Shape, Data: make([]byte, 16)}}, nil)
	if !errors.Is(err, onnxrt.ErrBadInput) || !strings.Contains(err.Error(), "too many elements") {
		t.Fatalf("a [2^40, 2^40] tensor: %v", err)
	}
	checkServing(t)
}

// checkServing runs mnist, as the server's other models go on answering.
func checkServing(t *testing.T) {
	t.Helper()
	s := open(t, zoo(t, "mnist", "model.onnx"), onnxrt.Options{})
	c := refs(t, "mnist")[0]
	out, err := s.Run(c.Inputs, c.In, nil)
	if err != nil {
		t.Fatal(err)
	}
	assertClose(t, "mnist after", out[0], c.Out[0])
}
