package validate

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// Document is one YAML document of a manifest file, decoded into its typed object.
type Document struct {
	File   string // path relative to the deploy/ directory
	Index  int    // position in the file, from 0
	Kind   string // apiVersion + "/" + kind, e.g. "apps/v1/Deployment"
	JSON   []byte // the document as JSON
	Object any    // a pointer to the typed object
}

func (d Document) String() string { return fmt.Sprintf("%s#%d (%s)", d.File, d.Index, d.Kind) }

// kinds maps apiVersion/kind to a constructor of its typed object. A kind not listed here
// fails validation: a manifest must not slip past the checks by being of an unknown kind.
var kinds = map[string]func() any{
	"v1/ConfigMap":                                     func() any { return new(corev1.ConfigMap) },
	"v1/Secret":                                        func() any { return new(corev1.Secret) },
	"v1/Service":                                       func() any { return new(corev1.Service) },
	"v1/PersistentVolumeClaim":                         func() any { return new(corev1.PersistentVolumeClaim) },
	"apps/v1/Deployment":                               func() any { return new(appsv1.Deployment) },
	"policy/v1/PodDisruptionBudget":                    func() any { return new(policyv1.PodDisruptionBudget) },
	"autoscaling/v2/HorizontalPodAutoscaler":           func() any { return new(autoscalingv2.HorizontalPodAutoscaler) },
	"serving.kserve.io/v1alpha1/ServingRuntime":        func() any { return new(ServingRuntime) },
	"serving.kserve.io/v1alpha1/ClusterServingRuntime": func() any { return new(ClusterServingRuntime) },
	"serving.kserve.io/v1beta1/InferenceService":       func() any { return new(InferenceService) },
}

// DecodeStrict decodes one document as the API server's strict field validation does:
// YAML with duplicate keys is refused, JSON keys must match the Go type's json tags exactly
// (case-sensitively), and a key the type does not have is an error, at any depth.
func DecodeStrict(y []byte, into any) error {
	j, err := yaml.YAMLToJSONStrict(y)
	if err != nil {
		return err
	}
	return decodeJSONStrict(j, into)
}

func decodeJSONStrict(j []byte, into any) error {
	strict, err := kjson.UnmarshalStrict(j, into, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

// SplitDocuments splits a multi-document YAML stream on "---" lines, dropping documents
// that hold only comments or whitespace.
func SplitDocuments(b []byte) [][]byte {
	var docs [][]byte
	var cur bytes.Buffer
	flush := func() {
		if hasContent(cur.Bytes()) {
			docs = append(docs, bytes.Clone(cur.Bytes()))
		}
		cur.Reset()
	}
	for _, line := range bytes.SplitAfter(b, []byte("\n")) {
		if t := bytes.TrimRight(line, " \t\r\n"); bytes.Equal(t, []byte("---")) {
			flush()
			continue
		}
		cur.Write(line)
	}
	flush()
	return docs
}

func hasContent(doc []byte) bool {
	for _, line := range strings.Split(string(doc), "\n") {
		t := strings.TrimSpace(line)
		if t != "" && !strings.HasPrefix(t, "#") {
			return true
		}
	}
	return false
}

// LoadDocument decodes one YAML document by its apiVersion and kind.
func LoadDocument(file string, index int, y []byte) (Document, error) {
	d := Document{File: file, Index: index}
	var tm struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	j, err := yaml.YAMLToJSONStrict(y)
	if err != nil {
		return d, fmt.Errorf("%s#%d: %w", file, index, err)
	}
	if err := kjson.UnmarshalCaseSensitivePreserveInts(j, &tm); err != nil {
		return d, fmt.Errorf("%s#%d: %w", file, index, err)
	}
	d.Kind, d.JSON = tm.APIVersion+"/"+tm.Kind, j
	newObj, ok := kinds[d.Kind]
	if !ok {
		return d, fmt.Errorf("%s: no Go type registered for %q", d, d.Kind)
	}
	d.Object = newObj()
	if err := decodeJSONStrict(j, d.Object); err != nil {
		return d, fmt.Errorf("%s: %w", d, err)
	}
	return d, nil
}

// LoadTree decodes every document of every .yaml file under root/dirs.
func LoadTree(root string, dirs ...string) ([]Document, error) {
	var files []string
	for _, dir := range dirs {
		err := filepath.WalkDir(filepath.Join(root, dir), func(p string, e os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !e.IsDir() && (strings.HasSuffix(p, ".yaml") || strings.HasSuffix(p, ".yml")) {
				files = append(files, p)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	sort.Strings(files)
	var docs []Document
	var errs []error
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		rel, _ := filepath.Rel(root, f)
		for i, y := range SplitDocuments(b) {
			d, err := LoadDocument(rel, i, y)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			docs = append(docs, d)
		}
	}
	return docs, errors.Join(errs...)
}
