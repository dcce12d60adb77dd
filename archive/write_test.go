package archive

import (
	"archive/tar"
	"archive/zip"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// inputs lays out what a user would pass to `torchd archive` and returns
// the options and the files the archive must hold.
func inputs(t *testing.T, format Format) (WriteOptions, map[string]string) {
	src := t.TempDir()
	writeTree(t, src, map[string]string{
		"resnet18.pt":                 fakeTorchScript,
		"cfg/torchd.toml":             exampleTOML,
		"index_to_name.json":          `{"0": ["n01440764", "tench"]}`,
		"assets/vocab.txt":            "a\nb\n",
		"assets/sub/deep.bin":         "\x00\x01\x02",
		"assets/.git/HEAD":            "hidden directories are left out",
		"assets/__pycache__/x.pyc":    "left out",
		"assets/.hidden-file-is-kept": "kept, as torch-model-archiver keeps it",
	})
	export := t.TempDir()
	o := WriteOptions{
		ModelName:      "resnet-18",
		Version:        "2.0",
		SerializedFile: filepath.Join(src, "resnet18.pt"),
		Handler:        "image_classifier",
		ExtraFiles:     []string{filepath.Join(src, "index_to_name.json"), " " + filepath.Join(src, "assets")},
		ConfigFile:     filepath.Join(src, "cfg/torchd.toml"),
		ExportPath:     export,
		Format:         format,
		Now:            time.Date(2024, 2, 29, 13, 5, 9, 0, time.Local),
	}
	want := map[string]string{
		"resnet18.pt":          fakeTorchScript,
		ConfigTOML:             exampleTOML,
		"index_to_name.json":   `{"0": ["n01440764", "tench"]}`,
		"vocab.txt":            "a\nb\n",
		"sub/deep.bin":         "\x00\x01\x02",
		".hidden-file-is-kept": "kept, as torch-model-archiver keeps it",
		ManifestPath:           "", // checked on its own
	}
	return o, want
}

const wantWrittenManifest = `{
  "createdOn": "29/02/2024 13:05:09",
  "runtime": "python",
  "model": {
    "modelName": "resnet-18",
    "serializedFile": "resnet18.pt",
    "handler": "image_classifier",
    "modelVersion": "2.0"
  },
  "archiverVersion": "torchd"
}`

// Write then Open gives back every file and the manifest, in all formats.
func TestWriteRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		format Format
		out    string
	}{
		{FormatDefault, "resnet-18.mar"},
		{"", "resnet-18.mar"},
		{FormatZipStore, "resnet-18.mar"},
		{FormatTGZ, "resnet-18.tar.gz"},
		{FormatNoArchive, "resnet-18"},
	} {
		t.Run(string(tc.format), func(t *testing.T) {
			o, want := inputs(t, tc.format)
			var done, total int64
			o.Progress = func(d, tot int64) { done, total = d, tot }
			out, err := Write(o)
			if err != nil {
				t.Fatal(err)
			}
			if out != filepath.Join(o.ExportPath, tc.out) {
				t.Errorf("wrote %q, want %q", out, tc.out)
			}
			if left := dirEntries(t, o.ExportPath); !reflect.DeepEqual(left, []string{tc.out}) {
				t.Errorf("export dir holds %q", left)
			}
			if done != total || total == 0 {
				t.Errorf("progress ended at %d of %d", done, total)
			}

			m, err := Open(out)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			var names []string
			for _, f := range m.Files {
				names = append(names, f.Name)
				data, err := os.ReadFile(filepath.Join(m.Dir, filepath.FromSlash(f.Name)))
				if err != nil {
					t.Fatal(err)
				}
				if f.Size != int64(len(data)) {
					t.Errorf("%s: Size %d, has %d bytes", f.Name, f.Size, len(data))
				}
				if f.Name == ManifestPath {
					if string(data) != wantWrittenManifest {
						t.Errorf("manifest:\n%s\nwant\n%s", data, wantWrittenManifest)
					}
				} else if w, ok := want[f.Name]; !ok || string(data) != w {
					t.Errorf("%s = %q, want %q (expected: %v)", f.Name, data, w, ok)
				}
			}
			if len(names) != len(want) {
				t.Errorf("files %q, want the keys of %v", names, want)
			}
			if m.Name != "resnet-18" || m.Version != "2.0" || m.Config.Handler != "image_classifier" || m.Config.BatchSize != Fixed(8) ||
				m.Labels[0] != "tench" || m.SerializedFile != "resnet18.pt" || len(m.Config.Inputs) != 1 {
				t.Errorf("model = %+v", m)
			}
		})
	}
}

// The .mar is laid out as torch-model-archiver lays it out: files only,
// deflated (or stored), the manifest last.
func TestWriteZipLayout(t *testing.T) {
	for _, format := range []Format{FormatDefault, FormatZipStore} {
		o, _ := inputs(t, format)
		out, err := Write(o)
		if err != nil {
			t.Fatal(err)
		}
		zr, err := zip.OpenReader(out)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, f := range zr.File {
			names = append(names, f.Name)
			if want := map[Format]uint16{FormatDefault: zip.Deflate, FormatZipStore: zip.Store}[format]; f.Method != want {
				t.Errorf("%s: method %d, want %d", f.Name, f.Method, want)
			}
		}
		zr.Close()
		want := []string{".hidden-file-is-kept", "index_to_name.json", ConfigTOML, "resnet18.pt", "sub/deep.bin", "vocab.txt", ManifestPath}
		if !reflect.DeepEqual(names, want) {
			t.Errorf("%s entries %q, want %q", format, names, want)
		}
	}
}

// The .tar.gz puts every entry under the model name.
func TestWriteTarLayout(t *testing.T) {
	o, _ := inputs(t, FormatTGZ)
	out, err := Write(o)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
	}
	if len(names) != 7 || names[len(names)-1] != "resnet-18/"+ManifestPath {
		t.Errorf("entries %q", names)
	}
	for _, n := range names {
		if !strings.HasPrefix(n, "resnet-18/") {
			t.Errorf("entry %q is not under resnet-18/", n)
		}
	}
}

// A TorchServe YAML config is stored under its name and named in the manifest.
func TestWriteYAMLConfig(t *testing.T) {
	src := t.TempDir()
	writeTree(t, src, map[string]string{"m.pt": fakeTorchScript, "model-config.yaml": "batchSize: 4\nhandler:\n  top_k: 3\n"})
	out, err := Write(WriteOptions{ModelName: "m", SerializedFile: filepath.Join(src, "m.pt"), Handler: "image_classifier",
		ConfigFile: filepath.Join(src, "model-config.yaml"), ExportPath: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	m, err := Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.Manifest.Model.ConfigFile != "model-config.yaml" || m.Config.BatchSize != Fixed(4) || m.Config.Options["top_k"] != int64(3) || m.Version != "1.0" {
		t.Errorf("model = %+v", m)
	}
	if m.Manifest.Model.ModelVersion != "" {
		t.Errorf("modelVersion written without --version: %q", m.Manifest.Model.ModelVersion)
	}
}

// The handler may come from the config alone.
func TestWriteHandlerFromConfig(t *testing.T) {
	src := t.TempDir()
	writeTree(t, src, map[string]string{"m.pt": fakeTorchScript, "c.toml": `handler = "tensor"`})
	out, err := Write(WriteOptions{ModelName: "m", SerializedFile: filepath.Join(src, "m.pt"), ConfigFile: filepath.Join(src, "c.toml"),
		ExportPath: t.TempDir(), Format: FormatNoArchive})
	if err != nil {
		t.Fatal(err)
	}
	m, err := Open(out)
	if err != nil {
		t.Fatal(err)
	}
	if m.Manifest.Model.Handler != "tensor" {
		t.Errorf("manifest handler %q", m.Manifest.Model.Handler)
	}
}

func TestWriteForce(t *testing.T) {
	for _, format := range []Format{FormatDefault, FormatTGZ, FormatNoArchive} {
		o, _ := inputs(t, format)
		out, err := Write(o)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Write(o); !errors.Is(err, ErrExists) {
			t.Errorf("%s: second Write: %v, want ErrExists", format, err)
		}
		o.Force, o.Version = true, "3.0"
		if _, err := Write(o); err != nil {
			t.Fatalf("%s: forced Write: %v", format, err)
		}
		m, err := Open(out)
		if err != nil {
			t.Fatal(err)
		}
		if m.Version != "3.0" {
			t.Errorf("%s: not overwritten: version %q", format, m.Version)
		}
		m.Close()
		if left := dirEntries(t, o.ExportPath); len(left) != 1 {
			t.Errorf("%s: export dir holds %q", format, left)
		}
	}
}

// Write refuses what Open would refuse, and leaves nothing behind.
func TestWriteRefuses(t *testing.T) {
	src := t.TempDir()
	writeTree(t, src, map[string]string{
		"m.pt": fakeTorchScript, "m.tflite": "x", "dup/m.pt": "x", "other/MAR-INF/MANIFEST.json": "{}",
		"bad.toml": "batch_size = 0", "handler.toml": `handler = "tensor"`, "ser.toml": `serialized_file = "x.pt"`,
		"cfg.json": "{}", "labels/index_to_name.json": `{"0": 5}`,
	})
	in := func(name string) string { return filepath.Join(src, name) }
	ok := WriteOptions{ModelName: "m", SerializedFile: in("m.pt"), Handler: "image_classifier"}
	for _, tc := range []struct {
		name   string
		change func(*WriteOptions)
		want   error
		msg    string
	}{
		{"bad model name", func(o *WriteOptions) { o.ModelName = "-m" }, ErrInvalidConfig, "must match"},
		{"model name with a slash", func(o *WriteOptions) { o.ModelName = "a/b" }, ErrInvalidConfig, "must match"},
		{"bad format", func(o *WriteOptions) { o.Format = "zip" }, ErrInvalidConfig, "archive format"},
		{"no serialized file", func(o *WriteOptions) { o.SerializedFile = "" }, ErrUnsupportedModel, "TorchScript"},
		{"tflite", func(o *WriteOptions) { o.SerializedFile = in("m.tflite") }, ErrUnsupportedModel, "not a model file torchd loads"},
		{"missing serialized file", func(o *WriteOptions) { o.SerializedFile = in("nope.pt") }, os.ErrNotExist, "nope.pt"},
		{"custom handler", func(o *WriteOptions) { o.Handler = "my_handler.py" }, ErrUnsupportedHandler, "custom Python handler"},
		{"no handler", func(o *WriteOptions) { o.Handler = "" }, ErrUnsupportedHandler, "no handler"},
		{"handler conflict", func(o *WriteOptions) { o.ConfigFile = in("handler.toml") }, ErrInvalidConfig, `differs from --handler`},
		{"serialized_file conflict", func(o *WriteOptions) { o.ConfigFile = in("ser.toml") }, ErrInvalidConfig, "differs from --serialized-file"},
		{"bad config", func(o *WriteOptions) { o.ConfigFile = in("bad.toml") }, ErrInvalidConfig, "batch_size: must be an integer >= 1"},
		{"config format", func(o *WriteOptions) { o.ConfigFile = in("cfg.json") }, ErrInvalidConfig, "want a .toml"},
		{"bad labels", func(o *WriteOptions) { o.ExtraFiles = []string{in("labels")} }, ErrInvalidConfig, "index_to_name.json"},
		{"duplicate name", func(o *WriteOptions) { o.ExtraFiles = []string{in("dup")} }, ErrDuplicateEntry, `"m.pt" comes from both --serialized-file and --extra-files`},
		{"manifest in extra files", func(o *WriteOptions) { o.ExtraFiles = []string{in("other")} }, ErrDuplicateEntry, "the manifest"},
		{"missing extra file", func(o *WriteOptions) { o.ExtraFiles = []string{in("nope")} }, os.ErrNotExist, "nope"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := ok
			o.ExportPath = t.TempDir()
			tc.change(&o)
			_, err := Write(o)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("err = %v; want %v containing %q", err, tc.want, tc.msg)
			}
			if left := dirEntries(t, o.ExportPath); len(left) != 0 {
				t.Errorf("left %q behind", left)
			}
		})
	}
	o := ok
	o.ExportPath = in("m.pt")
	if _, err := Write(o); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("export path is a file: %v", err)
	}
}
