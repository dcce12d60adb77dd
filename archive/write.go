package archive

import (
	"archive/tar"
	"archive/zip"
	"compress/flate"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Format is the kind of archive Write produces; the names are
// torch-model-archiver's --archive-format values.
type Format string

const (
	FormatDefault   Format = "default"    // name.mar, a deflated zip
	FormatZipStore  Format = "zip-store"  // name.mar, an uncompressed zip
	FormatTGZ       Format = "tgz"        // name.tar.gz, every entry under name/
	FormatNoArchive Format = "no-archive" // a directory name/
)

// Formats lists the formats Write accepts.
var Formats = []Format{FormatDefault, FormatZipStore, FormatTGZ, FormatNoArchive}

// WriteOptions describe an archive to write; the fields mirror
// torch-model-archiver's flags.
type WriteOptions struct {
	ModelName      string   // required; must match ^[A-Za-z0-9][A-Za-z0-9_\-.]*$, as torch-model-archiver requires
	Version        string   // modelVersion; "" leaves it out and readers use "1.0"
	SerializedFile string   // required: the TorchScript file or AOTInductor package (.pt2), stored at the root under its base name
	Handler        string   // a built-in handler (see HandlerNames); "" takes the config's handler
	ExtraFiles     []string // files stored at the root under their base names; a directory's contents go to the root
	// ConfigFile is a model-config.toml (stored as model-config.toml, where
	// Open looks for it) or a TorchServe .yaml (stored under its base name and
	// named by the manifest's configFile). Either is validated first.
	ConfigFile string
	ExportPath string // the directory to write into; default "."
	Format     Format // default FormatDefault
	Force      bool   // replace an existing archive of the same name
	// Progress, if set, is called as the files' bytes are written, with the
	// bytes done and the total.
	Progress func(done, total int64)
	Now      time.Time // createdOn; zero means time.Now()
}

// modelNameRE is torch-model-archiver's check on --model-name.
var modelNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_\-.]*$`)

// skipDirs are left out of an extra directory, as torch-model-archiver does;
// so are directories whose names start with ".".
var skipDirs = []string{"__MACOSX", "__pycache__"}

// source is one file to archive.
type source struct {
	name string // in the archive, slash-separated
	path string // on disk
	size int64
	mod  time.Time
	from string // the flag it came from, for duplicate errors
}

// Write builds a model archive, validating as Open would read it: the
// serialized file is TorchScript, the handler is built in, the config and
// index_to_name.json parse, and no two files share a name. It writes to a
// temporary name in ExportPath and renames, so a failed Write leaves nothing
// behind, and returns the path it wrote.
func Write(o WriteOptions) (string, error) {
	if !modelNameRE.MatchString(o.ModelName) {
		return "", fmt.Errorf("%w: model name %q must match %s", ErrInvalidConfig, o.ModelName, modelNameRE)
	}
	if o.Format == "" {
		o.Format = FormatDefault
	}
	if !slices.Contains(Formats, o.Format) {
		return "", fmt.Errorf("%w: archive format %q; want one of %q", ErrInvalidConfig, o.Format, Formats)
	}
	if o.ExportPath == "" {
		o.ExportPath = "."
	}
	if fi, err := os.Stat(o.ExportPath); err != nil || !fi.IsDir() {
		return "", fmt.Errorf("export path %q is not a directory", o.ExportPath)
	}
	out := filepath.Join(o.ExportPath, o.ModelName)
	switch o.Format {
	case FormatDefault, FormatZipStore:
		out += ".mar"
	case FormatTGZ:
		out += ".tar.gz"
	}
	if _, err := os.Lstat(out); err == nil && !o.Force {
		return "", fmt.Errorf("%s: %w", out, ErrExists)
	}

	files, manifest, err := collect(o, out)
	if err != nil {
		return "", err
	}
	data, err := manifest.Encode()
	if err != nil {
		return "", err
	}
	p := &progress{fn: o.Progress}
	for _, f := range files {
		p.total += f.size
	}
	switch o.Format {
	case FormatNoArchive:
		err = writeDir(out, files, data, p)
	case FormatTGZ:
		err = writeFile(out, func(w io.Writer) error { return writeTarGz(w, o.ModelName, files, data, manifest, p) })
	default:
		err = writeFile(out, func(w io.Writer) error { return writeZip(w, o.Format, files, data, manifest, p) })
	}
	if err != nil {
		return "", err
	}
	return out, nil
}

// collect gathers and checks the files and builds the manifest.
func collect(o WriteOptions, out string) ([]source, Manifest, error) {
	var files []source
	byName := map[string]string{ManifestPath: "the manifest"}
	add := func(name, p, from string, fi fs.FileInfo) error {
		if prev, ok := byName[name]; ok {
			return fmt.Errorf("%w: %q comes from both %s and %s", ErrDuplicateEntry, name, prev, from)
		}
		byName[name] = from
		files = append(files, source{name: name, path: p, size: fi.Size(), mod: fi.ModTime(), from: from})
		return nil
	}
	addFile := func(name, p, from string) error {
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		if !fi.Mode().IsRegular() {
			return fmt.Errorf("%s %q is not a regular file", from, p)
		}
		return add(name, p, from, fi)
	}

	if o.SerializedFile == "" {
		return nil, Manifest{}, fmt.Errorf("%w: no serialized file: torchd serves a TorchScript file", ErrUnsupportedModel)
	}
	serialized := filepath.Base(o.SerializedFile)
	if err := checkSerializedName(serialized); err != nil {
		return nil, Manifest{}, err
	}
	if err := addFile(serialized, o.SerializedFile, "--serialized-file"); err != nil {
		return nil, Manifest{}, err
	}

	configName, manifestConfig := "", ""
	if o.ConfigFile != "" {
		configName = filepath.Base(o.ConfigFile)
		switch strings.ToLower(filepath.Ext(configName)) {
		case ".toml":
			configName = ConfigTOML
		case ".yaml", ".yml":
			manifestConfig = configName
		default:
			return nil, Manifest{}, fmt.Errorf("%w: config file %q: want a .toml (torchd) or .yaml (TorchServe)", ErrInvalidConfig, o.ConfigFile)
		}
		if err := addFile(configName, o.ConfigFile, "--config-file"); err != nil {
			return nil, Manifest{}, err
		}
	}

	outAbs, _ := filepath.Abs(out)
	for _, extra := range o.ExtraFiles {
		if extra = strings.TrimSpace(extra); extra == "" {
			continue
		}
		fi, err := os.Stat(extra)
		if err != nil {
			return nil, Manifest{}, err
		}
		if !fi.IsDir() {
			if err := addFile(filepath.Base(extra), extra, "--extra-files"); err != nil {
				return nil, Manifest{}, err
			}
			continue
		}
		err = filepath.WalkDir(extra, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if p != extra && (strings.HasPrefix(d.Name(), ".") || slices.Contains(skipDirs, d.Name())) {
					return filepath.SkipDir
				}
				return nil
			}
			if abs, _ := filepath.Abs(p); abs == outAbs {
				return nil // an earlier build of this very archive
			}
			rel, err := filepath.Rel(extra, p)
			if err != nil {
				return err
			}
			return addFile(filepath.ToSlash(rel), p, "--extra-files "+extra)
		})
		if err != nil {
			return nil, Manifest{}, err
		}
	}

	// Check what Open will read, so a bad archive fails now, not when served.
	var cfg ModelConfig
	for _, f := range files {
		switch f.name {
		case ConfigTOML, configName, LabelsFile:
		default:
			continue
		}
		data, err := os.ReadFile(f.path)
		if err != nil {
			return nil, Manifest{}, err
		}
		if f.name == LabelsFile {
			if _, err := ParseLabels(f.name, data); err != nil {
				return nil, Manifest{}, fmt.Errorf("%s: %w", f.path, err)
			}
			continue
		}
		if f.name != ConfigTOML && f.name != configName {
			continue
		}
		c, err := ParseModelConfig(f.name, data)
		if err != nil {
			return nil, Manifest{}, fmt.Errorf("%s: %w", f.path, err)
		}
		if f.name == ConfigTOML || cfg.File == "" {
			cfg = c // Open prefers model-config.toml too
		}
	}
	handler := o.Handler
	if cfg.Handler != "" {
		if handler != "" && handler != cfg.Handler {
			return nil, Manifest{}, configErr(cfg.File, "handler", "%q differs from --handler %q; name one handler", cfg.Handler, handler)
		}
		handler = cfg.Handler
	}
	if err := checkHandler(handler); err != nil {
		return nil, Manifest{}, err
	}
	if cfg.SerializedFile != "" && path.Clean(cfg.SerializedFile) != serialized {
		return nil, Manifest{}, configErr(cfg.File, "serialized_file", "%q differs from --serialized-file %q", cfg.SerializedFile, serialized)
	}

	slices.SortFunc(files, func(a, b source) int { return strings.Compare(a.name, b.name) })
	now := o.Now
	if now.IsZero() {
		now = time.Now()
	}
	manifest := NewManifest(o.ModelName, o.Version, serialized, handler, manifestConfig, now)
	if IsPackageName(serialized) {
		sig, err := ReadPackageSignature(o.SerializedFile)
		if err != nil {
			return nil, Manifest{}, err
		}
		if err := recordPackage(&manifest, sig); err != nil {
			return nil, Manifest{}, err
		}
	}
	return files, manifest, nil
}

// progress reports bytes written to a callback.
type progress struct {
	fn          func(done, total int64)
	done, total int64
}

// copyFile copies one source into w, exactly the size it had when collected.
func (p *progress) copyFile(w io.Writer, f source) error {
	r, err := os.Open(f.path)
	if err != nil {
		return err
	}
	defer r.Close()
	var dst io.Writer = w
	if p.fn != nil {
		dst = progressWriter{w, p}
	}
	if _, err := io.CopyN(dst, r, f.size); err != nil {
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("%s shrank while being archived", f.path)
		}
		return err
	}
	return nil
}

type progressWriter struct {
	w io.Writer
	p *progress
}

func (pw progressWriter) Write(b []byte) (int, error) {
	n, err := pw.w.Write(b)
	pw.p.done += int64(n)
	pw.p.fn(pw.p.done, pw.p.total)
	return n, err
}

// writeFile writes an archive to a temporary file beside out and renames it
// into place.
func writeFile(out string, write func(io.Writer) error) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+"-*.tmp")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err = write(tmp); err != nil {
		return err
	}
	if err = tmp.Chmod(0o644); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), out)
}

func writeZip(w io.Writer, format Format, files []source, manifestData []byte, m Manifest, p *progress) error {
	zw := zip.NewWriter(w)
	method := zip.Store
	if format == FormatDefault {
		method = zip.Deflate
		// TorchScript weights barely compress; the fastest level costs little size.
		zw.RegisterCompressor(zip.Deflate, func(w io.Writer) (io.WriteCloser, error) {
			return flate.NewWriter(w, flate.BestSpeed)
		})
	}
	create := func(name string, mod time.Time) (io.Writer, error) {
		h := &zip.FileHeader{Name: name, Method: method, Modified: mod}
		h.SetMode(0o644)
		return zw.CreateHeader(h)
	}
	for _, f := range files {
		fw, err := create(f.name, f.mod)
		if err != nil {
			return err
		}
		if err := p.copyFile(fw, f); err != nil {
			return err
		}
	}
	// Last, as torch-model-archiver writes it.
	fw, err := create(ManifestPath, createdOn(m))
	if err != nil {
		return err
	}
	if _, err := fw.Write(manifestData); err != nil {
		return err
	}
	return zw.Close()
}

func writeTarGz(w io.Writer, top string, files []source, manifestData []byte, m Manifest, p *progress) error {
	gz, err := gzip.NewWriterLevel(w, gzip.BestSpeed)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(gz)
	for _, f := range files {
		h := &tar.Header{Typeflag: tar.TypeReg, Name: top + "/" + f.name, Mode: 0o644, Size: f.size, ModTime: f.mod}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if err := p.copyFile(tw, f); err != nil {
			return err
		}
	}
	h := &tar.Header{Typeflag: tar.TypeReg, Name: top + "/" + ManifestPath, Mode: 0o644, Size: int64(len(manifestData)), ModTime: createdOn(m)}
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	if _, err := tw.Write(manifestData); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return gz.Close()
}

// writeDir writes a no-archive directory beside out and renames it into
// place, moving an old one aside first when Force allowed it.
func writeDir(out string, files []source, manifestData []byte, p *progress) (err error) {
	tmp, err := os.MkdirTemp(filepath.Dir(out), "."+filepath.Base(out)+"-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(tmp)
		}
	}()
	put := func(name string, write func(io.Writer) error) error {
		dst := filepath.Join(tmp, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return err
		}
		if err := write(f); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	}
	for _, f := range files {
		if err := put(f.name, func(w io.Writer) error { return p.copyFile(w, f) }); err != nil {
			return err
		}
	}
	if err := put(ManifestPath, func(w io.Writer) error { _, err := w.Write(manifestData); return err }); err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	if _, err := os.Lstat(out); err != nil {
		return os.Rename(tmp, out)
	}
	old := tmp + ".old"
	if err := os.Rename(out, old); err != nil {
		return err
	}
	if err := os.Rename(tmp, out); err != nil {
		os.Rename(old, out) // put the old one back
		return err
	}
	return os.RemoveAll(old)
}

func createdOn(m Manifest) time.Time {
	t, err := time.ParseInLocation(CreatedOnLayout, m.CreatedOn, time.Local)
	if err != nil {
		return time.Now()
	}
	return t
}
