package archive

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// Encode writes what torch-model-archiver writes, byte for byte.
func TestManifestEncode(t *testing.T) {
	created := time.Date(2020, 7, 28, 6, 32, 8, 0, time.Local)
	m := NewManifest("resnet-18", "1.0", "resnet18.pt", "image_classifier", "model-config.yaml", created)
	m.ArchiverVersion = "0.12.0"
	got, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != tsManifest {
		t.Errorf("got\n%s\nwant\n%s", got, tsManifest)
	}

	// Optional keys are left out, as the archiver leaves them out.
	m = NewManifest("m", "", "m.pt", "tensor", "", created)
	got, _ = m.Encode()
	want := `{
  "createdOn": "28/07/2020 06:32:08",
  "runtime": "python",
  "model": {
    "modelName": "m",
    "serializedFile": "m.pt",
    "handler": "tensor"
  },
  "archiverVersion": "torchd"
}`
	if string(got) != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

// Python's json.dumps escapes non-ASCII and leaves <>& alone.
func TestManifestEncodeEscapes(t *testing.T) {
	m := Manifest{Runtime: "python", Model: ManifestModel{ModelName: "m", Handler: "tensor", SerializedFile: "café<&>😀.pt"}}
	got, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if want := `"serializedFile": "caf\u00e9<&>\ud83d\ude00.pt"`; !strings.Contains(string(got), want) {
		t.Errorf("got %s, want it to contain %s", got, want)
	}
	back, err := ParseManifest(got)
	if err != nil || back.Model.SerializedFile != "café<&>😀.pt" {
		t.Errorf("round trip: %q, %v", back.Model.SerializedFile, err)
	}
}

func TestParseManifest(t *testing.T) {
	m, err := ParseManifest([]byte("\xef\xbb\xbf" + tsManifest))
	if err != nil {
		t.Fatal(err)
	}
	want := ManifestModel{ModelName: "resnet-18", SerializedFile: "resnet18.pt", Handler: "image_classifier", ModelVersion: "1.0", ConfigFile: "model-config.yaml"}
	if m.Model.ModelName != want.ModelName || m.Model.SerializedFile != want.SerializedFile || m.Model.Handler != want.Handler ||
		m.Model.ModelVersion != want.ModelVersion || m.Model.ConfigFile != want.ConfigFile || m.Runtime != "python" {
		t.Errorf("got %+v", m)
	}
	// Unknown keys are ignored, as TorchServe (Gson) ignores them.
	if _, err := ParseManifest([]byte(manifestJSON(`{"modelName":"m","handler":"tensor","future":{"x":1}}`))); err != nil {
		t.Errorf("unknown key: %v", err)
	}
	for _, tc := range []struct{ json, key, msg string }{
		{`[]`, "", "must be a JSON object"},
		{`{"runtime":"java","model":{"modelName":"m"}}`, "runtime", `must be one of python, python2, python3, LSP, got "java"`},
		{`{"runtime":"python","model":{"handler":"tensor"}}`, "model.modelName", "required"},
		{`{"model":{"modelName":"m","modelVersion":1.0}}`, "model.modelVersion", "must be a JSON string, got number"},
		{`{"model":"m"}`, "model", "must be a JSON object, got string"},
		{`{"model":{"modelName":"m"},}`, "", "invalid JSON"},
	} {
		_, err := ParseManifest([]byte(tc.json))
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.File != ManifestPath || ce.Key != tc.key || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: got %v, want %s ...%s...", tc.json, err, tc.key, tc.msg)
		}
	}
}

func TestParseLabels(t *testing.T) {
	for _, tc := range []struct {
		name, data string
		want       map[int]string
	}{
		{LabelsFile, `{"0": "person", "1": "bicycle"}`, map[int]string{0: "person", 1: "bicycle"}},
		{LabelsFile, `{"0": ["n01440764", "tench"], "1": ["goldfish"]}`, map[int]string{0: "tench", 1: "goldfish"}},
		{"classes.txt", "cat\r\ndog\n bird \n", map[int]string{0: "cat", 1: "dog", 2: "bird"}},
		// As TorchServe's load_label_mapping: older examples' object_type_names, and keys that
		// are no class index (the token classification example's label_list), which its
		// handlers read themselves.
		{LabelsFile, `{"object_type_names": ["__background__", "person"]}`, map[int]string{0: "__background__", 1: "person"}},
		{LabelsFile, `{"label_list": ["O", "B-MISC", "I-MISC"]}`, map[int]string{}},
		{LabelsFile, `{"-1": "a", "0": "b"}`, map[int]string{0: "b"}},
	} {
		got, err := ParseLabels(tc.name, []byte(tc.data))
		if err != nil || len(got) != len(tc.want) {
			t.Errorf("%s: %v, %v", tc.data, got, err)
		}
		for k, v := range tc.want {
			if got[k] != v {
				t.Errorf("%s: [%d] = %q, want %q", tc.data, k, got[k], v)
			}
		}
	}
	for _, tc := range []struct{ data, key, msg string }{
		{`["a", "b"]`, "", "must be a JSON object"},
		{`{"0": 5}`, "0", "must be a label string or a list whose last element is the label, got number 5"},
		{`{"0": []}`, "0", "got an empty list"},
		{`{"0": ["a", 1]}`, "0", "got number 1"},
	} {
		_, err := ParseLabels(LabelsFile, []byte(tc.data))
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.File != LabelsFile || ce.Key != tc.key || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: got %v, want %s ...%s...", tc.data, err, tc.key, tc.msg)
		}
	}
}
