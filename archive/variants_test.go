package archive

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// zooFile is the absolute path of a file of the zoo (models/out, made by `make models`).
func zooFile(t *testing.T, zoo, name string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("..", "models", "out", zoo, name))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("no zoo package (run make models): %v", err)
	}
	return p
}

// variantDir is a directory archive whose serialized file is digits' fp32 package, with the
// given files (name: path on disk, or nil for a file that is not a package) beside it.
func variantDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	link := func(src, name string) {
		if err := os.Symlink(src, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	link(zooFile(t, "digits", "model.pt2"), "model.pt2")
	for name, src := range files {
		if src == "" {
			if err := os.WriteFile(filepath.Join(dir, name), []byte("not a package"), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		link(src, name)
	}
	cfg := "handler = \"tensor\"\nserialized_file = \"model.pt2\"\n"
	if err := os.WriteFile(filepath.Join(dir, ConfigTOML), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// Packages named <stem>_<precision>.pt2 beside the serialized <stem>.pt2 are its variants;
// another .pt2 (an encoder, say) is not read.
func TestVariants(t *testing.T) {
	dir := variantDir(t, map[string]string{
		"model_bf16.pt2":  zooFile(t, "digits", "model_bf16.pt2"),
		"model_fp16.pt2":  zooFile(t, "digits", "model_fp16.pt2"),
		"model_extra.pt2": "",
		"encoder.pt2":     "",
	})
	m, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if got, want := m.PackagePrecisions(), []string{"fp32", "bf16", "fp16"}; !slices.Equal(got, want) {
		t.Fatalf("precisions %q, want %q", got, want)
	}
	for p, file := range map[string]string{"fp32": "model.pt2", "bf16": "model_bf16.pt2", "fp16": "model_fp16.pt2"} {
		path, sig, ok := m.PackageFor(p)
		if !ok || filepath.Base(path) != file || sig.Precision != p {
			t.Errorf("PackageFor(%s) = %s, %+v, %v; want %s", p, path, sig, ok, file)
		}
	}
	if _, _, ok := m.PackageFor("int8"); ok {
		t.Error("PackageFor(int8) found a package the archive does not have")
	}
}

// A variant that would not serve the same requests as the serialized package, or is not the
// precision its name says, is a load error naming the file.
func TestVariantRefusals(t *testing.T) {
	for _, c := range []struct {
		name  string
		files map[string]string
		kind  error
		part  string
	}{
		{"recorded precision differs from the name", map[string]string{"model_int8.pt2": zooFile(t, "digits", "model_bf16.pt2")},
			ErrInvalidConfig, "variant model_int8.pt2 was exported in bf16 (its torchd.precision), not the int8 its name says"},
		{"other inputs", map[string]string{"model_int8.pt2": zooFile(t, "resnet18", "model_int8.pt2")},
			ErrInvalidConfig, "variant model_int8.pt2 takes inputs [input__0 float32[-1 3 224 224]], the serialized package [input__0 float32[-1 1 28 28]]"},
		{"not a package", map[string]string{"model_bf16.pt2": ""}, ErrUnsupportedModel, "variant model_bf16.pt2:"},
		{"the serialized package's own precision", map[string]string{"model_fp32.pt2": zooFile(t, "digits", "model.pt2")},
			ErrInvalidConfig, "model_fp32.pt2 is a fp32 variant, but model.pt2 is itself exported in fp32"},
	} {
		_, err := Open(variantDir(t, c.files))
		if !errors.Is(err, c.kind) || !strings.Contains(err.Error(), c.part) {
			t.Errorf("%s: %v, want %v containing %q", c.name, err, c.kind, c.part)
		}
	}
}

// precision takes auto beside the precisions, in model-config.toml as at registration.
func TestPrecisionSetting(t *testing.T) {
	var s Settings
	if err := s.Set("precision", "auto"); err != nil || s.Precision != Of(PrecisionAuto) {
		t.Fatalf("precision auto: %v, %v", err, s.Precision)
	}
	if err := s.Set("precision", "fastest"); err == nil || !strings.Contains(err.Error(), `or "auto", got "fastest"`) {
		t.Fatalf("precision fastest: %v", err)
	}
}
