package archive

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// ManifestPath is where a model archive keeps its manifest, relative to its root.
const ManifestPath = "MAR-INF/MANIFEST.json"

// CreatedOnLayout is torch-model-archiver's createdOn format (Python's "%d/%m/%Y %H:%M:%S").
const CreatedOnLayout = "02/01/2006 15:04:05"

// ArchiverVersion is written as archiverVersion by Write. TorchServe only
// checks that the key is present; cmd/torchd may set it to its own version.
var ArchiverVersion = "torchd"

// Manifest is MAR-INF/MANIFEST.json. The fields are declared in
// torch-model-archiver's order, so Encode writes the same bytes it would.
// Open keeps the manifest as read; the effective name and version are on Model.
type Manifest struct {
	CreatedOn       string        `json:"createdOn,omitempty"` // "dd/mm/YYYY HH:MM:SS", local time
	Runtime         string        `json:"runtime"`             // "python" (also python2, python3, LSP); "" reads as python
	Model           ManifestModel `json:"model"`
	ArchiverVersion string        `json:"archiverVersion,omitempty"`

	// MMS 1.0 manifest fields, read so MMS archives parse; Write never sets them.
	Description           string             `json:"description,omitempty"`
	License               string             `json:"license,omitempty"`
	Engine                *ManifestEngine    `json:"engine,omitempty"`
	ModelServerVersion    string             `json:"modelServerVersion,omitempty"`
	ImplementationVersion string             `json:"implementationVersion,omitempty"`
	SpecificationVersion  string             `json:"specificationVersion,omitempty"`
	Publisher             *ManifestPublisher `json:"publisher,omitempty"`
}

// ManifestModel is the manifest's "model" object.
type ManifestModel struct {
	ModelName        string         `json:"modelName"`
	SerializedFile   string         `json:"serializedFile,omitempty"` // the TorchScript file, relative to the archive root
	Handler          string         `json:"handler"`                  // a built-in handler name, see HandlerNames
	ModelFile        string         `json:"modelFile,omitempty"`      // eager model source; torchd refuses archives that have one
	ModelVersion     string         `json:"modelVersion,omitempty"`   // "" reads as "1.0", as in TorchServe
	Extensions       map[string]any `json:"extensions,omitempty"`
	RequirementsFile string         `json:"requirementsFile,omitempty"` // pip requirements, installed for handler processes under install_py_dep_per_model
	ConfigFile       string         `json:"configFile,omitempty"`       // model-config.yaml (TorchServe); torchd's own is model-config.toml

	// Read for TorchServe's Java reader and MMS; Write never sets them.
	Description string `json:"description,omitempty"`
	Version     string `json:"version,omitempty"`
	Envelope    string `json:"envelope,omitempty"`
	SourceVocab string `json:"sourceVocab,omitempty"` // older archivers' --source-vocab, for TorchServe's text_classifier
}

// ManifestEngine is MMS's "engine" object.
type ManifestEngine struct {
	EngineName    string `json:"engineName,omitempty"`
	EngineVersion string `json:"engineVersion,omitempty"`
}

// ManifestPublisher is MMS's "publisher" object.
type ManifestPublisher struct {
	Author string `json:"author,omitempty"`
	Email  string `json:"email,omitempty"`
}

// runtimes TorchServe and MMS write; torchd ignores the runtime otherwise,
// since it runs no Python either way.
var runtimes = []string{"python", "python2", "python3", "LSP"}

// NewManifest returns the manifest torch-model-archiver would write for a
// TorchScript model with a built-in handler. version and configFile may be
// empty, which leaves them out.
func NewManifest(name, version, serializedFile, handler, configFile string, created time.Time) Manifest {
	return Manifest{
		CreatedOn: created.Format(CreatedOnLayout),
		Runtime:   "python",
		Model: ManifestModel{
			ModelName:      name,
			SerializedFile: serializedFile,
			Handler:        handler,
			ModelVersion:   version,
			ConfigFile:     configFile,
		},
		ArchiverVersion: ArchiverVersion,
	}
}

// ParseManifest decodes a MANIFEST.json written by torch-model-archiver or
// MMS's model-archiver. Unknown keys are ignored, as TorchServe does; keys of
// the wrong type, an unknown runtime and a missing modelName are errors.
func ParseManifest(data []byte) (Manifest, error) {
	var m Manifest
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf")) // a BOM, from Windows editors
	if err := json.Unmarshal(data, &m); err != nil {
		var te *json.UnmarshalTypeError
		var se *json.SyntaxError
		switch {
		case errors.As(err, &te) && te.Field != "":
			return m, configErr(ManifestPath, te.Field, "must be a JSON %s, got %s", jsonKind(te.Type), te.Value)
		case errors.As(err, &te):
			return m, configErr(ManifestPath, "", "must be a JSON object, got %s", te.Value)
		case errors.As(err, &se):
			return m, configErr(ManifestPath, "", "invalid JSON at byte %d: %v", se.Offset, err)
		}
		return m, configErr(ManifestPath, "", "invalid JSON: %v", err)
	}
	if m.Runtime != "" && !slices.Contains(runtimes, m.Runtime) {
		return m, configErr(ManifestPath, "runtime", "must be one of %s, got %q", strings.Join(runtimes, ", "), m.Runtime)
	}
	if m.Model.ModelName == "" {
		return m, configErr(ManifestPath, "model.modelName", "required")
	}
	return m, nil
}

// jsonKind names a Go type as the JSON kind that decodes into it.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Struct, reflect.Map, reflect.Pointer:
		return "object"
	case reflect.Slice, reflect.Array:
		return "array"
	}
	return "number"
}

// Encode returns the manifest as torch-model-archiver writes it: Python's
// json.dumps(indent=2), which escapes non-ASCII characters, leaves <>&
// alone, and ends without a newline.
func (m Manifest) Encode() ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(m); err != nil {
		return nil, err
	}
	out := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	return asciiJSON(out), nil
}

// asciiJSON escapes non-ASCII runes as \uXXXX (surrogate pairs above the
// BMP), as Python's ensure_ascii does. In encoded JSON they only occur inside
// strings, so escaping them everywhere is safe.
func asciiJSON(b []byte) []byte {
	if !slices.ContainsFunc(b, func(c byte) bool { return c >= utf8.RuneSelf }) {
		return b
	}
	var out bytes.Buffer
	for _, r := range string(b) {
		switch {
		case r < utf8.RuneSelf:
			out.WriteByte(byte(r))
		case r > 0xFFFF:
			r -= 0x10000
			fmt.Fprintf(&out, `\u%04x\u%04x`, 0xD800+(r>>10), 0xDC00+(r&0x3FF))
		default:
			fmt.Fprintf(&out, `\u%04x`, r)
		}
	}
	return out.Bytes()
}
