package archive

import (
	"archive/zip"
	"encoding/json"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
)

// PackageExtension is the manifest's model.extensions key under which Write records an
// AOTInductor package's signature (a PackageSignature), so that the exported ranges are known
// without opening the package.
const PackageExtension = "torchd.package"

// The metadata keys of a package that torchd reads; models/pt2.py writes the torchd.* ones
// at export time (AOTInductor records no input shapes or ranges that its loader exposes).
const (
	metaInputs    = "torchd.inputs"
	metaOutputs   = "torchd.outputs"
	metaMarch     = "torchd.march"
	metaPrecision = "torchd.precision"
	metaDevice    = "AOTI_DEVICE_KEY"
)

// PackageTensor is one input or output of a package: Shape has -1 for a dynamic dimension,
// and Min and Max bound every dimension of an input (equal for a static one).
type PackageTensor struct {
	Name  string  `json:"name"`
	DType string  `json:"dtype"`
	Shape []int64 `json:"shape"`
	Min   []int64 `json:"min,omitempty"`
	Max   []int64 `json:"max,omitempty"`
}

// DynamicDim is one dimension of an input that the package was exported to take in a range.
type DynamicDim struct {
	Input string `json:"input"`
	Dim   int    `json:"dim"`
	Min   int64  `json:"min"`
	Max   int64  `json:"max"`
}

// PackageSignature is what torchd knows of an AOTInductor package without loading its
// compiled code: its tensors, the batch range (the leading dimension's range shared by every
// input), its other dynamic dimensions, and what it was compiled for.
type PackageSignature struct {
	Inputs    []PackageTensor `json:"inputs"`
	Outputs   []PackageTensor `json:"outputs,omitempty"`
	BatchMin  int64           `json:"batch_min"`
	BatchMax  int64           `json:"batch_max"`
	Dynamic   []DynamicDim    `json:"dynamic_dims"`
	Device    string          `json:"device,omitempty"`    // AOTI_DEVICE_KEY: cpu or cuda
	March     string          `json:"march,omitempty"`     // the -march of a CPU package
	Precision string          `json:"precision,omitempty"` // fp32, bf16 or fp16: the dtype it was exported to compute in
	// Plain marks a package without torchd's metadata (plain aoti_compile_and_package): its
	// inputs were read from its generated code and are named input__<n>; the config's
	// declared inputs name them.
	Plain bool `json:"plain,omitempty"`
}

// ReadPackageSignature reads the signature of the AOTInductor package at file from the
// metadata of its model "model", without loading its compiled code.
func ReadPackageSignature(file string) (*PackageSignature, error) {
	r, err := zip.OpenReader(file)
	if err != nil {
		return nil, fmt.Errorf("%w: %s is not an AOTInductor package: %v", ErrUnsupportedModel, file, err)
	}
	defer r.Close()
	var md map[string]string
	for _, f := range r.File {
		// <package>/data/aotinductor/<model>/<id>_metadata.json
		if path.Base(path.Dir(f.Name)) != "model" || !strings.HasSuffix(f.Name, "_metadata.json") ||
			!strings.HasSuffix(path.Dir(path.Dir(f.Name)), "data/aotinductor") {
			continue
		}
		rc, err := f.Open()
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", file, f.Name, err)
		}
		b, err := io.ReadAll(io.LimitReader(rc, maxSmallFile+1))
		rc.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", file, f.Name, err)
		}
		if err := json.Unmarshal(b, &md); err != nil {
			return nil, fmt.Errorf("%w: %s: %s: %v", ErrInvalidConfig, file, f.Name, err)
		}
		break
	}
	if md == nil && isExportedProgram(&r.Reader) {
		return nil, fmt.Errorf("%w: %s is an exported program (torch.export.save), not a compiled package: compile it with torch._inductor.aoti_compile_and_package(ep, package_path=\"model.pt2\") and serve that (docs/guide/pt2.md)", ErrUnsupportedModel, path.Base(file))
	}
	if md == nil {
		return nil, fmt.Errorf("%w: %s has no metadata for a model named \"model\" (data/aotinductor/model/*_metadata.json)", ErrUnsupportedModel, file)
	}
	if _, ok := md[metaInputs]; !ok {
		sig, err := plainSignature(&r.Reader, md)
		if err != nil || sig != nil {
			return sig, err
		}
	}
	return packageSignature(md)
}

// packageSignature builds a signature from a package's metadata, checking the recorded specs
// as the loader does.
func packageSignature(md map[string]string) (*PackageSignature, error) {
	raw, ok := md[metaInputs]
	if !ok {
		return nil, fmt.Errorf("%w: the package has no %q metadata: export it with its input specs (docs/guide/pt2.md)", ErrUnsupportedModel, metaInputs)
	}
	s := &PackageSignature{Device: md[metaDevice], March: md[metaMarch], Precision: md[metaPrecision]}
	if s.Precision == "" {
		s.Precision = "fp32"
	}
	if err := json.Unmarshal([]byte(raw), &s.Inputs); err != nil {
		return nil, fmt.Errorf("%w: package metadata %q: %v", ErrInvalidConfig, metaInputs, err)
	}
	if raw, ok := md[metaOutputs]; ok {
		if err := json.Unmarshal([]byte(raw), &s.Outputs); err != nil {
			return nil, fmt.Errorf("%w: package metadata %q: %v", ErrInvalidConfig, metaOutputs, err)
		}
	}
	if err := s.check(); err != nil {
		return nil, err
	}
	return s, nil
}

// check validates the specs and fills in the batch range and the dynamic dimensions.
func (s *PackageSignature) check() error {
	if len(s.Inputs) == 0 {
		return fmt.Errorf("%w: package metadata %q lists no inputs", ErrInvalidConfig, metaInputs)
	}
	s.BatchMin, s.BatchMax, s.Dynamic = 0, 1<<62, nil
	for _, in := range s.Inputs {
		if !slices.Contains(DTypes, in.DType) || in.DType == "string" {
			return fmt.Errorf("%w: package input %q has dtype %q", ErrInvalidConfig, in.Name, in.DType)
		}
		if len(in.Min) != len(in.Shape) || len(in.Max) != len(in.Shape) {
			return fmt.Errorf("%w: package input %q: shape %v needs min and max of the same rank, have %v and %v", ErrInvalidConfig, in.Name, in.Shape, in.Min, in.Max)
		}
		for d := range in.Shape {
			if in.Min[d] < 0 || in.Min[d] > in.Max[d] || (in.Shape[d] >= 0 && (in.Min[d] != in.Shape[d] || in.Max[d] != in.Shape[d])) {
				return fmt.Errorf("%w: package input %q: dimension %d of shape %v has bounds [%d, %d]", ErrInvalidConfig, in.Name, d, in.Shape, in.Min[d], in.Max[d])
			}
			if in.Shape[d] < 0 {
				s.Dynamic = append(s.Dynamic, DynamicDim{Input: in.Name, Dim: d, Min: in.Min[d], Max: in.Max[d]})
			}
		}
		if len(in.Shape) > 0 {
			s.BatchMin, s.BatchMax = max(s.BatchMin, in.Min[0]), min(s.BatchMax, in.Max[0])
		}
	}
	if s.BatchMin > s.BatchMax {
		return fmt.Errorf("%w: the package's inputs share no batch size: their leading dimensions' ranges do not overlap", ErrInvalidConfig)
	}
	return nil
}

// CheckBatchSize refuses a batch size outside the package's exported batch range.
func (s *PackageSignature) CheckBatchSize(n int) error {
	if int64(n) < s.BatchMin || int64(n) > s.BatchMax {
		return fmt.Errorf("batch_size %d is outside the batch range [%d, %d] that the package was exported with", n, s.BatchMin, s.BatchMax)
	}
	return nil
}

// recordPackage stores sig in the manifest's extensions.
func recordPackage(m *Manifest, sig *PackageSignature) error {
	b, err := json.Marshal(sig)
	if err != nil {
		return err
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	if m.Model.Extensions == nil {
		m.Model.Extensions = map[string]any{}
	}
	m.Model.Extensions[PackageExtension] = v
	return nil
}

// loadPackage sets m.Package: the signature the manifest records, else the package's own.
func (m *Model) loadPackage() error {
	if !m.IsPackage() {
		return nil
	}
	if v, ok := m.Manifest.Model.Extensions[PackageExtension]; ok {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		var sig PackageSignature
		if err := json.Unmarshal(b, &sig); err != nil {
			return configErr(ManifestPath, "model.extensions."+PackageExtension, "%v", err)
		}
		if err := sig.check(); err != nil {
			return &ConfigError{File: ManifestPath, Key: "model.extensions." + PackageExtension, Err: err}
		}
		m.Package = &sig
		return nil
	}
	sig, err := ReadPackageSignature(m.SerializedPath())
	if err != nil {
		return err
	}
	m.Package = sig
	return nil
}
