package archive

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// PrecisionAuto is the precision setting that lets the daemon choose among an archive's
// package variants: the fastest one the host computes natively (core.ChoosePrecision).
const PrecisionAuto = "auto"

// CheckPrecision reports whether p is a value of the precision setting: one of Precisions
// or PrecisionAuto.
func CheckPrecision(p string) error {
	if !slices.Contains(Precisions, p) && p != PrecisionAuto {
		return fmt.Errorf("must be one of %q or %q, got %q", Precisions, PrecisionAuto, p)
	}
	return nil
}

// Variant is one more AOTInductor package of the archive's model, exported in another
// precision than the serialized file: <stem>_<precision>.pt2 beside the serialized
// <stem>.pt2 (model_int8.pt2 beside model.pt2). Open checks that its recorded
// torchd.precision is the one its name gives and that its inputs, outputs, batch range and
// device are the serialized package's, so that any variant serves the same requests.
type Variant struct {
	Precision string
	File      string // slash-separated, relative to Model.Dir
	Package   *PackageSignature
}

// PackagePrecisions lists the precisions the archive's packages were exported in: the serialized
// file's first, then its variants'. Empty for TorchScript.
func (m *Model) PackagePrecisions() []string {
	if m.Package == nil {
		return nil
	}
	out := []string{m.Package.Precision}
	for _, v := range m.Variants {
		out = append(out, v.Precision)
	}
	return out
}

// PackageFor is the path on disk and signature of the archive's package exported in
// precision: the serialized file's, or a variant's; ok is false when none was.
func (m *Model) PackageFor(precision string) (file string, sig *PackageSignature, ok bool) {
	if m.Package == nil {
		return "", nil, false
	}
	if m.Package.Precision == precision {
		return m.SerializedPath(), m.Package, true
	}
	for _, v := range m.Variants {
		if v.Precision == precision {
			return filepath.Join(m.Dir, filepath.FromSlash(v.File)), v.Package, true
		}
	}
	return "", nil, false
}

// LoadVariants finds and checks the variants of a Model built in place rather than by Open
// (a Triton repository's version directory): the regular files beside its serialized package
// named <stem>_<precision>.pt2. A link is not followed, so that a repository serves only its
// own files. Open does this itself.
func (m *Model) LoadVariants() error {
	if m.Package == nil {
		return nil
	}
	entries, err := os.ReadDir(filepath.Join(m.Dir, filepath.FromSlash(path.Dir(m.SerializedFile))))
	if err != nil {
		return err
	}
	dir := path.Dir(m.SerializedFile)
	for _, e := range entries {
		name := path.Join(dir, e.Name())
		if !e.Type().IsRegular() || name == m.SerializedFile || slices.ContainsFunc(m.Files, func(f File) bool { return f.Name == name }) {
			continue
		}
		if fi, err := e.Info(); err == nil {
			m.Files = append(m.Files, File{Name: name, Size: fi.Size()})
		}
	}
	return m.loadVariants()
}

// loadVariants finds and checks the serialized package's variants (see Variant). A file
// <stem>_<word>.pt2 whose word is not a precision is not a variant (an encoder package,
// say) and is left alone.
func (m *Model) loadVariants() error {
	if m.Package == nil || m.Kind == KindTorchScript {
		return nil
	}
	dir, base := path.Split(m.SerializedFile)
	stem := strings.TrimSuffix(base, path.Ext(base)) + "_"
	for _, f := range m.Files {
		d, b := path.Split(f.Name)
		if d != dir || !IsPackageName(b) || !strings.HasPrefix(b, stem) {
			continue
		}
		p := strings.TrimSuffix(strings.TrimPrefix(b, stem), path.Ext(b))
		if !slices.Contains(Precisions, p) {
			continue
		}
		if p == m.Package.Precision {
			return fmt.Errorf("%w: %s is a %s variant, but %s is itself exported in %s", ErrInvalidConfig, f.Name, p, m.SerializedFile, p)
		}
		sig, err := ReadPackageSignature(filepath.Join(m.Dir, filepath.FromSlash(f.Name)))
		if err != nil {
			return fmt.Errorf("variant %s: %w", f.Name, err)
		}
		if err := m.Package.sameModel(sig, p); err != nil {
			return fmt.Errorf("%w: variant %s %v", ErrInvalidConfig, f.Name, err)
		}
		m.Variants = append(m.Variants, Variant{Precision: p, File: f.Name, Package: sig})
	}
	return nil
}

// sameModel reports how v, a variant named for precision, differs from s in what a request
// sees: its recorded precision, inputs, outputs, batch range and device.
func (s *PackageSignature) sameModel(v *PackageSignature, precision string) error {
	switch {
	case v.Precision != precision:
		return fmt.Errorf("was exported in %s (its torchd.precision), not the %s its name says", v.Precision, precision)
	case !slices.EqualFunc(s.Inputs, v.Inputs, sameTensor):
		return fmt.Errorf("takes inputs %s, the serialized package %s", tensorsString(v.Inputs), tensorsString(s.Inputs))
	case !slices.EqualFunc(s.Outputs, v.Outputs, sameTensor):
		return fmt.Errorf("gives outputs %s, the serialized package %s", tensorsString(v.Outputs), tensorsString(s.Outputs))
	case s.BatchMin != v.BatchMin || s.BatchMax != v.BatchMax:
		return fmt.Errorf("takes batches of [%d, %d], the serialized package [%d, %d]", v.BatchMin, v.BatchMax, s.BatchMin, s.BatchMax)
	case s.Device != v.Device:
		return fmt.Errorf("was compiled for device %q, the serialized package for %q", v.Device, s.Device)
	}
	return nil
}

func sameTensor(a, b PackageTensor) bool {
	return a.Name == b.Name && a.DType == b.DType && slices.Equal(a.Shape, b.Shape) &&
		slices.Equal(a.Min, b.Min) && slices.Equal(a.Max, b.Max)
}

func tensorsString(ts []PackageTensor) string {
	var parts []string
	for _, t := range ts {
		parts = append(parts, fmt.Sprintf("%s %s%v", t.Name, t.DType, t.Shape))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}
