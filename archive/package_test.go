package archive

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// textPackageMetadata is the metadata models/pt2.py writes for a text model: two inputs
// with a dynamic batch [1, 64] and a dynamic sequence length [1, 256].
var textPackageMetadata = map[string]string{
	"AOTI_DEVICE_KEY": "cpu",
	"torchd.march":    "x86-64-v3",
	"torchd.inputs": `[{"name": "input_ids", "dtype": "int64", "shape": [-1, -1], "min": [1, 1], "max": [64, 256]},
		{"name": "attention_mask", "dtype": "int64", "shape": [-1, -1], "min": [1, 1], "max": [64, 256]}]`,
	"torchd.outputs":   `[{"name": "output__0", "dtype": "float32", "shape": [-1, -1, 384]}]`,
	"torchd.precision": "bf16",
}

// fakePackage writes a zip laid out as an AOTInductor package with the given metadata for
// its model "model". The archive package reads only the metadata.
func fakePackage(t *testing.T, md map[string]string) string {
	t.Helper()
	b, err := json.Marshal(md)
	if err != nil {
		t.Fatal(err)
	}
	data := makeZip(t,
		zipEntry{name: "model/data/aotinductor/model/cabc123.wrapper.so", data: "\x7fELF"},
		zipEntry{name: "model/data/aotinductor/model/cabc123_metadata.json", data: string(b)},
		zipEntry{name: "model/data/aotinductor/other/cdef_metadata.json", data: `{"torchd.inputs": "[]"}`})
	return writeTemp(t, "model.pt2", data)
}

// Write records a package's batch range and dynamic dimensions in the manifest, in every
// format, and Open reads them back from there.
func TestWriteRecordsPackageSignature(t *testing.T) {
	pkg := fakePackage(t, textPackageMetadata)
	for _, format := range Formats {
		t.Run(string(format), func(t *testing.T) {
			out, err := Write(WriteOptions{ModelName: "minilm_pt2", SerializedFile: pkg, Handler: "text_classifier", ExportPath: t.TempDir(), Format: format})
			if err != nil {
				t.Fatal(err)
			}
			m, err := Open(out)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			if _, ok := m.Manifest.Model.Extensions[PackageExtension]; !ok {
				t.Fatalf("manifest extensions %v lack %q", m.Manifest.Model.Extensions, PackageExtension)
			}
			p := m.Package
			if p == nil || p.BatchMin != 1 || p.BatchMax != 64 || p.Device != "cpu" || p.March != "x86-64-v3" || p.Precision != "bf16" {
				t.Fatalf("package signature %+v", p)
			}
			want := []DynamicDim{{"input_ids", 0, 1, 64}, {"input_ids", 1, 1, 256}, {"attention_mask", 0, 1, 64}, {"attention_mask", 1, 1, 256}}
			if len(p.Dynamic) != len(want) {
				t.Fatalf("dynamic dims %+v, want %+v", p.Dynamic, want)
			}
			for i := range want {
				if p.Dynamic[i] != want[i] {
					t.Fatalf("dynamic dims %+v, want %+v", p.Dynamic, want)
				}
			}
			if err := p.CheckBatchSize(65); err == nil || !strings.Contains(err.Error(), "outside the batch range [1, 64]") {
				t.Fatalf("batch 65: %v", err)
			}
			if err := p.CheckBatchSize(64); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Open prefers the manifest's record: an archive whose record says [1, 16] is held to it.
func TestOpenReadsRecordedRange(t *testing.T) {
	pkg := fakePackage(t, textPackageMetadata)
	out, err := Write(WriteOptions{ModelName: "m", SerializedFile: pkg, Handler: "text_classifier", ExportPath: t.TempDir(), Format: FormatNoArchive})
	if err != nil {
		t.Fatal(err)
	}
	m, err := Open(out)
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
	rec := m.Manifest
	sig := *m.Package
	sig.Inputs = append([]PackageTensor(nil), sig.Inputs...)
	for i := range sig.Inputs {
		in := sig.Inputs[i]
		in.Max = []int64{16, in.Max[1]}
		sig.Inputs[i] = in
	}
	if err := recordPackage(&rec, &sig); err != nil {
		t.Fatal(err)
	}
	data, err := rec.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, ManifestPath), data, 0o644); err != nil {
		t.Fatal(err)
	}
	m, err = Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.Package.BatchMax != 16 {
		t.Fatalf("batch max %d, want the recorded 16", m.Package.BatchMax)
	}
}

// A bare .pt2 opened without an archive gets its signature from the package itself.
func TestOpenBarePackage(t *testing.T) {
	pkg := fakePackage(t, textPackageMetadata)
	m, err := Open(pkg, WithHandler("text_classifier"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.Package == nil || m.Package.BatchMax != 64 || len(m.Package.Dynamic) != 4 {
		t.Fatalf("package signature %+v", m.Package)
	}
}

// Packages torchd cannot serve are refused when archived, with the reason.
func TestWriteRefusesBadPackages(t *testing.T) {
	with := func(k, v string) map[string]string {
		md := map[string]string{}
		for key, val := range textPackageMetadata {
			md[key] = val
		}
		if v == "" {
			delete(md, k)
		} else {
			md[k] = v
		}
		return md
	}
	cases := []struct {
		name string
		path string
		want error
		msg  string
	}{
		{"not a zip", writeTemp(t, "model.pt2", []byte("not a zip")), ErrUnsupportedModel, "not an AOTInductor package"},
		{"no model metadata", writeTemp(t, "model.pt2", makeZip(t, zipEntry{name: "x/data/aotinductor/other/c_metadata.json", data: "{}"})),
			ErrUnsupportedModel, `no metadata for a model named "model"`},
		{"no torchd specs", fakePackage(t, with("torchd.inputs", "")), ErrUnsupportedModel, `no "torchd.inputs" metadata`},
		{"bad bounds", fakePackage(t, with("torchd.inputs", `[{"name":"x","dtype":"float32","shape":[-1,3],"min":[1,3],"max":[0,3]}]`)), ErrInvalidConfig, "has bounds [1, 0]"},
		{"bad dtype", fakePackage(t, with("torchd.inputs", `[{"name":"x","dtype":"string","shape":[-1],"min":[1],"max":[8]}]`)), ErrInvalidConfig, `dtype "string"`},
		{"disjoint batch ranges", fakePackage(t, with("torchd.inputs", `[{"name":"a","dtype":"float32","shape":[-1],"min":[1],"max":[8]},{"name":"b","dtype":"float32","shape":[-1],"min":[9],"max":[16]}]`)),
			ErrInvalidConfig, "share no batch size"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			export := t.TempDir()
			_, err := Write(WriteOptions{ModelName: "m", SerializedFile: c.path, Handler: "tensor", ExportPath: export})
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("err = %v; want %v containing %q", err, c.want, c.msg)
			}
			if left := dirEntries(t, export); len(left) != 0 {
				t.Errorf("left %q behind", left)
			}
		})
	}
}
