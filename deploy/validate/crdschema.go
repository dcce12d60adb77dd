package validate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// Schema is the part of a CRD's structural openAPIV3Schema that decides which fields exist
// and what JSON type they hold.
type Schema struct {
	Type                 string             `json:"type"`
	Properties           map[string]*Schema `json:"properties"`
	Items                *Schema            `json:"items"`
	AdditionalProperties *AdditionalProps   `json:"additionalProperties"`
	Required             []string           `json:"required"`
	Enum                 []any              `json:"enum"`
	PreserveUnknown      bool               `json:"x-kubernetes-preserve-unknown-fields"`
	IntOrString          bool               `json:"x-kubernetes-int-or-string"`
	EmbeddedResource     bool               `json:"x-kubernetes-embedded-resource"`
}

// AdditionalProps is additionalProperties: a schema for every value, or a bare boolean.
type AdditionalProps struct {
	Allowed bool
	Schema  *Schema
}

func (a *AdditionalProps) UnmarshalJSON(b []byte) error {
	if bytes.Equal(b, []byte("true")) || bytes.Equal(b, []byte("false")) {
		a.Allowed = string(b) == "true"
		return nil
	}
	a.Allowed = true
	return json.Unmarshal(b, &a.Schema)
}

// KServeVersion is the KServe release whose CRD schemas the manifests are checked against.
const KServeVersion = "v0.17.0"

var kserveCRDFiles = map[string]string{
	"servingruntimes":        "serving.kserve.io_servingruntimes.yaml",
	"clusterservingruntimes": "serving.kserve.io_clusterservingruntimes.yaml",
	"inferenceservices":      "serving.kserve.io_inferenceservices.yaml",
}

// KServeCRDSchemas reads KServe's published CRD schemas (config/crd/full of its Go module
// at version) into plural → version → schema. The go command fetches the module from the
// module proxy and checks it against the checksum database; nothing of it is compiled, and
// nothing of it is committed here.
func KServeCRDSchemas(version string) (map[string]map[string]*Schema, error) {
	cmd := exec.Command("go", "mod", "download", "-json", "github.com/kserve/kserve@"+version)
	cmd.Dir = os.TempDir() // outside any module: the download must not touch go.mod
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go mod download github.com/kserve/kserve@%s: %v: %s", version, err, stderr.Bytes())
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(b, &mod); err != nil {
		return nil, err
	}
	out := map[string]map[string]*Schema{}
	for plural, file := range kserveCRDFiles {
		y, err := os.ReadFile(filepath.Join(mod.Dir, "config", "crd", "full", file))
		if err != nil {
			return nil, err
		}
		var crd struct {
			Spec struct {
				Versions []struct {
					Name   string `json:"name"`
					Schema struct {
						OpenAPIV3Schema *Schema `json:"openAPIV3Schema"`
					} `json:"schema"`
				} `json:"versions"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal(y, &crd); err != nil {
			return nil, fmt.Errorf("%s: %v", file, err)
		}
		out[plural] = map[string]*Schema{}
		for _, v := range crd.Spec.Versions {
			out[plural][v.Name] = v.Schema.OpenAPIV3Schema
		}
	}
	return out, nil
}

// CheckSchema walks a custom resource against its CRD schema, as the API server's pruning
// and validation would, and returns every field the schema does not declare, every value of
// the wrong JSON type, every missing required field and every value outside an enum.
// metadata is left to the typed decode (metav1.ObjectMeta): CRD schemas do not describe it.
func CheckSchema(obj []byte, s *Schema) error {
	var v any
	d := json.NewDecoder(bytes.NewReader(obj))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		return err
	}
	var errs []error
	walk("", v, s, true, &errs)
	return errors.Join(errs...)
}

func walk(path string, v any, s *Schema, root bool, errs *[]error) {
	if s == nil {
		return
	}
	fail := func(format string, args ...any) {
		*errs = append(*errs, fmt.Errorf("%s: %s", orRoot(path), fmt.Sprintf(format, args...)))
	}
	if s.IntOrString {
		switch v.(type) {
		case string, json.Number:
		default:
			fail("want an integer or a string, got %s", jsonKind(v))
		}
		return
	}
	if len(s.Enum) > 0 && !inEnum(v, s.Enum) {
		fail("%v is not one of %v", v, s.Enum)
	}
	switch s.Type {
	case "object":
		m, ok := v.(map[string]any)
		if !ok {
			fail("want an object, got %s", jsonKind(v))
			return
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			p := path + "." + k
			switch {
			case root && k == "metadata":
			case s.EmbeddedResource && (k == "apiVersion" || k == "kind" || k == "metadata"):
			case s.Properties[k] != nil:
				walk(p, m[k], s.Properties[k], false, errs)
			case s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil:
				walk(p, m[k], s.AdditionalProperties.Schema, false, errs)
			case s.AdditionalProperties != nil && s.AdditionalProperties.Allowed, s.PreserveUnknown:
			default:
				*errs = append(*errs, fmt.Errorf("%s: unknown field %q", orRoot(path), k))
			}
		}
		for _, r := range s.Required {
			if _, ok := m[r]; !ok {
				fail("required field %q is missing", r)
			}
		}
	case "array":
		a, ok := v.([]any)
		if !ok {
			fail("want an array, got %s", jsonKind(v))
			return
		}
		for i, e := range a {
			walk(fmt.Sprintf("%s[%d]", path, i), e, s.Items, false, errs)
		}
	case "string":
		if _, ok := v.(string); !ok {
			fail("want a string, got %s", jsonKind(v))
		}
	case "integer":
		n, ok := v.(json.Number)
		if _, err := n.Int64(); !ok || err != nil {
			fail("want an integer, got %s", jsonKind(v))
		}
	case "number":
		if _, ok := v.(json.Number); !ok {
			fail("want a number, got %s", jsonKind(v))
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			fail("want a boolean, got %s", jsonKind(v))
		}
	}
}

func orRoot(path string) string {
	if path == "" {
		return "(root)"
	}
	return strings.TrimPrefix(path, ".")
}

func inEnum(v any, enum []any) bool {
	for _, e := range enum {
		if fmt.Sprint(e) == fmt.Sprint(v) {
			return true
		}
	}
	return false
}

func jsonKind(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		return fmt.Sprintf("the string %q", x)
	case json.Number:
		return "the number " + x.String()
	case bool:
		return "a boolean"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}
