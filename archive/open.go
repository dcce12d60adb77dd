package archive

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Kind is the form a model was given in.
type Kind string

const (
	KindMAR         Kind = "mar"         // a .mar zip
	KindTarGz       Kind = "tar.gz"      // a .tar.gz or .tgz
	KindDir         Kind = "dir"         // a directory (torch-model-archiver's no-archive)
	KindTorchScript Kind = "torchscript" // a bare TorchScript file
	KindTriton      Kind = "triton"      // a version of a Triton repository model (package archive/triton)
)

// Model is an opened model: its files on disk and what its manifest and
// config declare. It knows nothing of tensors; the daemon loads
// SerializedPath with LibTorch. Close removes what Open extracted.
type Model struct {
	Source string // the path given to Open
	Kind   Kind
	// Dir is the model's root: the extraction directory of a .mar or .tar.gz,
	// the directory given, or a bare TorchScript file's own directory (of
	// which only that file belongs to the model).
	Dir string

	Name    string // modelName from the manifest, else the file or directory name without extension
	Version string // modelVersion from the manifest, else "1.0", as in TorchServe

	Manifest    Manifest // as read; zero when HasManifest is false
	HasManifest bool
	// Config is what the archive declares, with Handler resolved to the handler
	// the model uses. Settings it does not give are unset.
	Config ModelConfig

	SerializedFile string         // the TorchScript file, slash-separated, relative to Dir
	Labels         map[int]string // from index_to_name.json or options.label_file; nil if neither
	Files          []File         // every file of the model, sorted by name
	// Package is an AOTInductor package's signature: the one the manifest records (Write
	// records it), else the package's own; nil for TorchScript.
	Package *PackageSignature
	// Variants are the archive's packages of the same model in other precisions than the
	// serialized package's (see Variant), sorted by file name.
	Variants []Variant
	// PythonHandler is the handler a handler process runs, as TorchServe's worker names it
	// ("x.py", "module:fn", a TorchServe built-in), when Config.Handler is HandlerPython.
	PythonHandler string

	tmp string // the extraction directory Close removes; "" when nothing was extracted
}

// File is one file of a model.
type File struct {
	Name string // slash-separated, relative to Model.Dir
	Size int64
}

// Option configures Open.
type Option func(*openOptions)

type openOptions struct {
	limits  Limits
	handler string
	tempDir string
}

// WithLimits bounds extraction; see Limits for the defaults.
func WithLimits(l Limits) Option { return func(o *openOptions) { o.limits = l } }

// WithHandler names the handler for a model that names none itself. A bare
// TorchScript file never does, so it needs this; an archive's own handler
// (manifest or model-config.toml) always wins.
func WithHandler(name string) Option { return func(o *openOptions) { o.handler = name } }

// WithTempDir sets where archives are extracted; default os.TempDir().
func WithTempDir(dir string) Option { return func(o *openOptions) { o.tempDir = dir } }

// maxSmallFile bounds the manifest, config and label files Open reads into memory.
const maxSmallFile = 64 << 20

// Open opens a model in any of the forms torchd serves, told apart by name:
//
//   - name.mar: a zip with MAR-INF/MANIFEST.json (torch-model-archiver's default format);
//   - name.tar.gz or name.tgz: the same files in a gzip-compressed tar, usually under one top-level directory;
//   - a directory holding the same files (torch-model-archiver's no-archive);
//   - name.pt, .pth, .ts or .torchscript: a bare TorchScript file; pass WithHandler;
//   - name.pt2: a bare AOTInductor package; pass WithHandler.
//
// Archives are extracted into a new private directory under WithTempDir;
// if anything fails it is removed before Open returns, and otherwise
// Model.Close removes it. Directories and bare files are used in place.
//
// Errors wrap the sentinels of this package (see errors.go) and say what
// was wrong: *EntryError for a refused archive entry, *ConfigError for a bad
// key in one of the model's files.
func Open(name string, opts ...Option) (*Model, error) {
	o := openOptions{}
	for _, opt := range opts {
		opt(&o)
	}
	o.limits = o.limits.withDefaults()
	m, err := open(name, o)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return m, nil
}

func open(name string, o openOptions) (*Model, error) {
	fi, err := os.Stat(name)
	if err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(name)
	if err != nil {
		return nil, err
	}
	m := &Model{Source: name}
	lower := strings.ToLower(name)
	switch {
	case fi.IsDir():
		m.Kind, m.Dir = KindDir, singleDir(abs)
	case strings.HasSuffix(lower, ".mar"):
		m.Kind = KindMAR
	case strings.HasSuffix(lower, ".tar.gz"), strings.HasSuffix(lower, ".tgz"):
		m.Kind = KindTarGz
	case isModelName(lower):
		return openTorchScript(m, abs, fi, o)
	default:
		return nil, fmt.Errorf("%w: want a .mar, .tar.gz, .tgz, a directory, or a TorchScript file (%s)",
			ErrUnknownFormat, strings.Join(torchScriptExts, ", "))
	}
	if m.Kind != KindDir {
		if err := m.extract(abs, fi.Size(), o); err != nil {
			return nil, err
		}
	}
	if err := m.load(o); err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

// extract unpacks the archive at src into a new directory of its own.
func (m *Model) extract(src string, size int64, o openOptions) (err error) {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	// 0700: no other user reads an unchecked archive. The pid in the name lets a later
	// process remove what this one leaves behind if it is killed (daemon's SweepTemp).
	tmp, err := os.MkdirTemp(o.tempDir, fmt.Sprintf("torchd-%d-model-*", os.Getpid()))
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(tmp)
		}
	}()
	x, err := newExtractor(tmp, o.limits)
	if err != nil {
		return err
	}
	defer x.close()
	m.Dir = tmp
	if m.Kind == KindMAR {
		err = extractZip(f, size, x)
	} else {
		err = extractTarGz(f, x)
		// TorchServe strips the first path component of a .tar.gz, which
		// torch-model-archiver puts under name/; stripping only a single
		// top-level directory does the same and also reads tars made without one.
		m.Dir = singleDir(tmp)
	}
	if err != nil {
		return err
	}
	m.tmp = tmp
	return nil
}

// singleDir returns dir's only entry if that is a directory (other than
// MAR-INF, which belongs to dir itself), else dir.
func singleDir(dir string) string {
	entries, err := os.ReadDir(dir)
	if err == nil && len(entries) == 1 && entries[0].IsDir() && entries[0].Name() != "MAR-INF" {
		return filepath.Join(dir, entries[0].Name())
	}
	return dir
}

func openTorchScript(m *Model, abs string, fi fs.FileInfo, o openOptions) (*Model, error) {
	base := filepath.Base(abs)
	m.Kind = KindTorchScript
	m.Dir = filepath.Dir(abs)
	m.Name = strings.TrimSuffix(base, filepath.Ext(base))
	m.Version = "1.0"
	m.SerializedFile = base
	m.Files = []File{{Name: base, Size: fi.Size()}}
	m.Config.Handler = o.handler
	if err := checkHandler(o.handler); err != nil {
		return nil, &ConfigError{Key: "handler", Err: err}
	}
	if err := m.loadPackage(); err != nil {
		return nil, err
	}
	return m, nil
}

// load reads the manifest, config and labels of the files in m.Dir and checks
// that torchd can serve the model.
func (m *Model) load(o openOptions) error {
	if err := m.list(o.limits.MaxFiles); err != nil {
		return err
	}
	if m.has(ManifestPath) {
		data, err := m.read(ManifestPath)
		if err != nil {
			return err
		}
		if m.Manifest, err = ParseManifest(data); err != nil {
			return err
		}
		m.HasManifest = true
	}
	if err := m.loadConfig(); err != nil {
		return err
	}
	if !m.HasManifest {
		// TorchServe tolerates a missing manifest with an empty default, and
		// then fails later for want of a handler. torchd says so at once: a
		// .mar must have one; a directory or .tar.gz may instead describe the
		// model in model-config.toml.
		if m.Kind == KindMAR {
			return fmt.Errorf("%w in the .mar", ErrMissingManifest)
		}
		if m.Config.File != ConfigTOML {
			return fmt.Errorf("%w and no %s", ErrMissingManifest, ConfigTOML)
		}
	}
	m.Name, m.Version = m.Manifest.Model.ModelName, "1.0"
	if m.Name == "" {
		m.Name = nameFromPath(m.Source)
	}
	if v := firstNonEmpty(m.Manifest.Model.ModelVersion, m.Manifest.Model.Version); v != "" {
		m.Version = v
	}
	if err := m.resolveHandler(o.handler); err != nil {
		return err
	}
	if err := m.resolveSerialized(); err != nil {
		return err
	}
	if err := m.loadPackage(); err != nil {
		return err
	}
	if err := m.loadVariants(); err != nil {
		return err
	}
	return m.loadLabels()
}

// firstNonEmpty returns the first non-empty string.
func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

func nameFromPath(p string) string {
	base := filepath.Base(filepath.Clean(p))
	for _, ext := range []string{".tar.gz", ".tgz", ".mar"} {
		if len(base) > len(ext) && strings.EqualFold(base[len(base)-len(ext):], ext) {
			return base[:len(base)-len(ext)]
		}
	}
	return base
}

// list fills m.Files with every regular file below m.Dir (and every symlink to
// one, which extraction has checked stays inside).
func (m *Model) list(maxFiles int) error {
	n := 0
	err := filepath.WalkDir(m.Dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if n++; maxFiles >= 0 && n > maxFiles+1 { // +1: the root itself
			return fmt.Errorf("%w (%d)", ErrTooManyFiles, maxFiles)
		}
		if d.IsDir() {
			return nil
		}
		fi, err := os.Stat(p)
		if err != nil || !fi.Mode().IsRegular() {
			return nil // a dangling link or a device is no file of the model
		}
		rel, err := filepath.Rel(m.Dir, p)
		if err != nil {
			return err
		}
		m.Files = append(m.Files, File{Name: filepath.ToSlash(rel), Size: fi.Size()})
		return nil
	})
	slices.SortFunc(m.Files, func(a, b File) int { return strings.Compare(a.Name, b.Name) })
	return err
}

func (m *Model) has(name string) bool {
	_, ok := slices.BinarySearchFunc(m.Files, name, func(f File, n string) int { return strings.Compare(f.Name, n) })
	return ok
}

// Path returns the path on disk of name, a file of the model such as a
// vocabulary a handler option names. It refuses names that are not local
// (ErrPathTraversal, ErrAbsolutePath) or not files of the model (ErrMissingFile).
func (m *Model) Path(name string) (string, error) {
	clean, err := entryName(name)
	if err != nil {
		return "", fmt.Errorf("%q: %w", name, err)
	}
	if clean == "" || !m.has(clean) {
		return "", fmt.Errorf("%q: %w", name, ErrMissingFile)
	}
	return filepath.Join(m.Dir, filepath.FromSlash(clean)), nil
}

// IsPackage reports whether the serialized file is an AOTInductor package (.pt2).
func (m *Model) IsPackage() bool { return IsPackageName(m.SerializedPath()) }

// SerializedPath is the path on disk of the TorchScript file or AOTInductor package.
func (m *Model) SerializedPath() string {
	return filepath.Join(m.Dir, filepath.FromSlash(m.SerializedFile))
}

// Close removes the directory Open extracted the model into, if any. It is
// safe to call more than once.
func (m *Model) Close() error {
	if m.tmp == "" {
		return nil
	}
	tmp := m.tmp
	m.tmp = ""
	return os.RemoveAll(tmp)
}

// read returns a small file of the model, which must be in m.Files.
func (m *Model) read(name string) ([]byte, error) {
	p, err := m.Path(name)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxSmallFile+1))
	if err == nil && len(data) > maxSmallFile {
		err = configErr(name, "", "larger than %d bytes", maxSmallFile)
	}
	return data, err
}

// loadConfig reads model-config.toml if present, else the manifest's configFile.
func (m *Model) loadConfig() error {
	name := ConfigTOML
	if !m.has(name) {
		cf := m.Manifest.Model.ConfigFile
		if cf == "" {
			return nil
		}
		clean, err := entryName(cf)
		if err != nil || clean == "" {
			return configErr(ManifestPath, "model.configFile", "%w: %q must be a relative path inside the archive", cmpErr(err, ErrUnsafePath), cf)
		}
		if !m.has(clean) {
			return configErr(ManifestPath, "model.configFile", "%w: %q", ErrMissingFile, cf)
		}
		name = clean
	}
	data, err := m.read(name)
	if err != nil {
		return err
	}
	m.Config, err = ParseModelConfig(name, data)
	return err
}

func cmpErr(err, def error) error {
	if err != nil {
		return err
	}
	return def
}

// resolveHandler settles which handler serves the model. model-config.toml's
// handler wins over the manifest's, so one archive can carry a custom Python
// handler for TorchServe and name a built-in one for torchd; the caller's
// WithHandler is the fallback when neither names one. A handler torchd has no native
// implementation of (a custom handler.py, TorchServe's own by name or path, an eager
// model's) resolves to HandlerPython: handler processes run it.
func (m *Model) resolveHandler(fallback string) error {
	mm := m.Manifest.Model
	eager := m.HasManifest && mm.ModelFile != ""
	switch {
	case m.Config.Handler == HandlerPython:
		entry := firstNonEmpty(mm.Handler, pythonOnly(fallback))
		if entry == "" {
			return configErr(m.Config.File, "handler", "%w: handler %q runs the manifest's handler in a handler process, and the manifest names none", ErrUnsupportedHandler, HandlerPython)
		}
		m.PythonHandler = tsEntry(entry)
		return nil
	case m.Config.Handler != "":
		if eager {
			return configErr(ManifestPath, "model.modelFile",
				"%w: %q makes this an eager model (Python source plus weights), which the built-in handler %q cannot load: set handler = %q to run the archive's handler in a handler process, or save the model with torch.jit.script or torch.jit.save",
				ErrUnsupportedModel, mm.ModelFile, m.Config.Handler, HandlerPython)
		}
		return nil // checked when the config was parsed
	}
	name, file, key := mm.Handler, ManifestPath, "model.handler"
	if name == "" {
		name = fallback
		if !m.HasManifest {
			file, key = ConfigTOML, "handler"
		}
	}
	switch {
	case name != "" && IsHandlerName(name) && name != HandlerPython && !eager && !m.ForTorchServes(name):
		m.Config.Handler = name
	case name == "" && eager:
		m.Config.Handler, m.PythonHandler = HandlerPython, "base_handler"
	case name == HandlerPython:
		return configErr(file, key, "%w", errNoManifestHandler)
	case isPythonHandler(name) || eager || name != "" && m.has(name+".py"):
		m.Config.Handler, m.PythonHandler = HandlerPython, tsEntry(name)
	default:
		return &ConfigError{File: file, Key: key, Err: checkHandler(name)}
	}
	return nil
}

var errNoManifestHandler = fmt.Errorf("%w: handler %q runs the archive's own Python handler in a handler process, and its manifest names none: give the handler's name (a built-in, x.py or module:function) instead", ErrUnsupportedHandler, HandlerPython)

// RunManifestHandler makes handler processes run the archive's own handler, the one its
// manifest names (torch-model-archiver --handler), as handler = "python" in model-config.toml
// does; it fails with ErrUnsupportedHandler where the manifest names none.
func (m *Model) RunManifestHandler() error {
	if m.Config.Handler == HandlerPython && m.PythonHandler != "" {
		return nil
	}
	entry := m.Manifest.Model.Handler
	if entry == "" || entry == HandlerPython {
		return errNoManifestHandler
	}
	m.Config.Handler, m.PythonHandler = HandlerPython, tsEntry(entry)
	return nil
}

// ForTorchServes reports whether the archive holds what TorchServe's own handler of that name
// reads rather than what torchd's does, so that TorchServe's runs it, in a handler process:
// its text_classifier reads a torchtext vocabulary (source_vocab.pt, or the manifest's
// sourceVocab), torchd's a WordPiece vocab.txt or a tokenizer.json.
func (m *Model) ForTorchServes(name string) bool {
	switch name {
	case "text_classifier":
		ts := m.Manifest.Model.SourceVocab != "" || m.has("source_vocab.pt")
		return ts && !m.has("vocab.txt") && !m.has("tokenizer.json")
	}
	return false
}

// resolveSerialized settles the TorchScript file: model-config.toml's
// serialized_file, else the manifest's serializedFile, else, with no
// manifest, the one TorchScript file at the root.
func (m *Model) resolveSerialized() error {
	file, key, name := ManifestPath, "model.serializedFile", m.Manifest.Model.SerializedFile
	if m.Config.SerializedFile != "" {
		file, key, name = m.Config.File, "serialized_file", m.Config.SerializedFile
	}
	if name == "" {
		if m.Config.Handler == HandlerPython {
			return nil // the handler finds its model, as TorchServe's may
		}
		if m.HasManifest {
			return configErr(file, key, "required: torchd serves the TorchScript file named here (torch-model-archiver --serialized-file)")
		}
		var found []string
		for _, f := range m.Files {
			if !strings.Contains(f.Name, "/") && isModelName(f.Name) {
				found = append(found, f.Name)
			}
		}
		if len(found) != 1 {
			return configErr(ConfigTOML, "serialized_file", "not set, and the archive root has %d TorchScript files %q; name the model file", len(found), found)
		}
		m.SerializedFile = found[0]
		return nil
	}
	clean, err := entryName(name)
	if err != nil || clean == "" {
		return configErr(file, key, "%w: %q must be a relative path inside the archive", cmpErr(err, ErrUnsafePath), name)
	}
	if err := checkSerializedName(clean); err != nil && m.Config.Handler != HandlerPython {
		return &ConfigError{File: file, Key: key, Err: err}
	}
	if !m.has(clean) {
		return configErr(file, key, "%w: %q", ErrMissingFile, name)
	}
	m.SerializedFile = clean
	return nil
}

// loadLabels reads options.label_file if set, else index_to_name.json if present.
func (m *Model) loadLabels() error {
	name, err := m.Config.StringOption("label_file", "")
	if err != nil {
		return err
	}
	if name == "" {
		if !m.has(LabelsFile) {
			return nil
		}
		name = LabelsFile
	}
	if _, err := m.Path(name); err != nil {
		return &ConfigError{File: m.Config.File, Key: m.Config.optionKey("label_file"), Err: err}
	}
	data, err := m.read(name)
	if err != nil {
		return err
	}
	m.Labels, err = ParseLabels(name, data)
	return err
}
