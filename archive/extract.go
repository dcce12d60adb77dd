package archive

import (
	"archive/tar"
	"archive/zip"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// Limits bound what extracting one archive may write. Archives are untrusted:
// sizes are counted while copying, never taken from headers. A zero field
// means its default; a negative one means no limit.
type Limits struct {
	MaxTotalBytes int64 // all files together; default 4 GiB
	MaxFileBytes  int64 // any one file; default 2 GiB
	MaxFiles      int   // entries, directories included; default 10000
}

// Default limits.
const (
	DefaultMaxTotalBytes = 4 << 30
	DefaultMaxFileBytes  = 2 << 30
	DefaultMaxFiles      = 10000
)

func (l Limits) withDefaults() Limits {
	if l.MaxTotalBytes == 0 {
		l.MaxTotalBytes = DefaultMaxTotalBytes
	}
	if l.MaxFileBytes == 0 {
		l.MaxFileBytes = DefaultMaxFileBytes
	}
	if l.MaxFiles == 0 {
		l.MaxFiles = DefaultMaxFiles
	}
	return l
}

// maxLinkTarget bounds a zip symlink's content, which holds its target.
const maxLinkTarget = 4096

type entryType uint8

const (
	typeDir entryType = iota + 1
	typeFile
	typeLink
)

// extractor writes the entries of one archive below dir, refusing anything
// that could leave dir, clash, or exceed the limits. Every write goes through
// an os.Root, so even a check missed here cannot escape dir.
type extractor struct {
	root    *os.Root
	dir     string
	limits  Limits
	total   int64
	entries int
	seen    map[string]entryType // cleaned name -> what it is, parents included
	links   []string             // symlinks, checked again once all are written
	buf     []byte
}

func newExtractor(dir string, l Limits) (*extractor, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	return &extractor{root: root, dir: dir, limits: l, seen: map[string]entryType{}}, nil
}

func (x *extractor) close() error { return x.root.Close() }

// entryName validates an entry (or manifest) name and returns it cleaned and
// slash-separated; "" means the root itself. Backslashes are read as
// separators, as Windows zip tools write them.
func entryName(raw string) (string, error) {
	name := strings.ReplaceAll(raw, `\`, "/")
	if name == "" || strings.ContainsRune(name, 0) {
		return "", ErrUnsafePath
	}
	if strings.HasPrefix(name, "/") || (len(name) >= 2 && name[1] == ':' && isLetter(name[0])) {
		return "", ErrAbsolutePath
	}
	for _, part := range strings.Split(name, "/") {
		if part == ".." {
			return "", ErrPathTraversal
		}
	}
	if name = path.Clean(name); name == "." {
		return "", nil
	}
	return name, nil
}

func isLetter(c byte) bool { return 'a' <= c|0x20 && c|0x20 <= 'z' }

// count enforces MaxFiles; every entry counts, so a flood of empty
// directories cannot exhaust inodes either.
func (x *extractor) count() error {
	x.entries++
	if x.limits.MaxFiles >= 0 && x.entries > x.limits.MaxFiles {
		return fmt.Errorf("%w (%d)", ErrTooManyFiles, x.limits.MaxFiles)
	}
	return nil
}

// claim records name as a new entry of type t. Names must be unique (a
// repeated directory is harmless), and no entry may sit below a file or a link:
// writing through a link is how extraction escapes elsewhere.
func (x *extractor) claim(name string, t entryType) error {
	for p := path.Dir(name); p != "."; p = path.Dir(p) {
		switch x.seen[p] {
		case typeFile:
			return fmt.Errorf("%w: parent %q is a file", ErrDuplicateEntry, p)
		case typeLink:
			return fmt.Errorf("%w: parent %q is a link; torchd does not write through links", ErrLinkEscape, p)
		}
	}
	if prev, ok := x.seen[name]; ok {
		if prev == typeDir && t == typeDir {
			return nil
		}
		return ErrDuplicateEntry
	}
	x.seen[name] = t
	for p := path.Dir(name); p != "."; p = path.Dir(p) {
		if _, ok := x.seen[p]; ok {
			break
		}
		x.seen[p] = typeDir
	}
	return nil
}

func (x *extractor) mkdirParent(name string) error {
	if d := path.Dir(name); d != "." {
		return x.root.MkdirAll(d, 0o700)
	}
	return nil
}

func (x *extractor) dirEntry(name string) error {
	if err := x.claim(name, typeDir); err != nil {
		return err
	}
	return x.root.MkdirAll(name, 0o700)
}

// file writes one regular file from r. declared is the size the header
// claims, used only to refuse early; the bytes are counted as they come.
func (x *extractor) file(name string, r io.Reader, declared int64) error {
	if x.limits.MaxFileBytes >= 0 && declared > x.limits.MaxFileBytes {
		return fmt.Errorf("%w (%d bytes)", ErrFileTooLarge, x.limits.MaxFileBytes)
	}
	if err := x.claim(name, typeFile); err != nil {
		return err
	}
	if err := x.mkdirParent(name); err != nil {
		return err
	}
	f, err := x.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	err = x.copy(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// copy copies r to w and stops before writing a byte past a limit, so a zip
// bomb costs one buffer of decompression, not the disk.
func (x *extractor) copy(w io.Writer, r io.Reader) error {
	if x.buf == nil {
		x.buf = make([]byte, 64<<10)
	}
	var n int64
	for {
		k, rerr := r.Read(x.buf)
		if k > 0 {
			n += int64(k)
			x.total += int64(k)
			if x.limits.MaxFileBytes >= 0 && n > x.limits.MaxFileBytes {
				return fmt.Errorf("%w (%d bytes)", ErrFileTooLarge, x.limits.MaxFileBytes)
			}
			if x.limits.MaxTotalBytes >= 0 && x.total > x.limits.MaxTotalBytes {
				return fmt.Errorf("%w (%d bytes)", ErrArchiveTooLarge, x.limits.MaxTotalBytes)
			}
			if _, err := w.Write(x.buf[:k]); err != nil {
				return err
			}
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			return corrupt(rerr)
		}
	}
}

// corrupt marks a read error as ErrCorrupt, keeping a limit error as it is.
func corrupt(err error) error {
	for _, e := range []error{ErrCorrupt, ErrArchiveTooLarge, ErrFileTooLarge} {
		if errors.Is(err, e) {
			return err
		}
	}
	return fmt.Errorf("%w: %v", ErrCorrupt, err)
}

// symlink creates a relative link that stays inside the archive. The lexical
// check here catches plain escapes; finish resolves every link for real, which
// also catches chains of links that escape together.
func (x *extractor) symlink(name, target string) error {
	if target == "" || strings.ContainsRune(target, 0) {
		return fmt.Errorf("%w: empty target", ErrLinkEscape)
	}
	t := strings.ReplaceAll(target, `\`, "/")
	if strings.HasPrefix(t, "/") || (len(t) >= 2 && t[1] == ':' && isLetter(t[0])) {
		return fmt.Errorf("%w: absolute target %q", ErrLinkEscape, target)
	}
	if r := path.Join(path.Dir(name), t); r == ".." || strings.HasPrefix(r, "../") {
		return fmt.Errorf("%w: target %q", ErrLinkEscape, target)
	}
	if err := x.claim(name, typeLink); err != nil {
		return err
	}
	if err := x.mkdirParent(name); err != nil {
		return err
	}
	if err := x.root.Symlink(t, name); err != nil {
		return err
	}
	x.links = append(x.links, name)
	return nil
}

// hardlink copies an earlier regular file of the archive: a real hard link
// could tie the extraction to a file elsewhere, a copy cannot.
func (x *extractor) hardlink(name, target string) error {
	t, err := entryName(target)
	if err != nil || t == "" || x.seen[t] != typeFile {
		return fmt.Errorf("%w: hard link to %q, which is not an earlier file of the archive", ErrLinkEscape, target)
	}
	src, err := x.root.Open(t)
	if err != nil {
		return err
	}
	defer src.Close()
	return x.file(name, src, 0)
}

// finish resolves every symlink now that all entries exist, and refuses any
// that leads outside dir or nowhere.
func (x *extractor) finish() error {
	if len(x.links) == 0 {
		return nil
	}
	realDir, err := filepath.EvalSymlinks(x.dir)
	if err != nil {
		return err
	}
	for _, l := range x.links {
		p, err := filepath.EvalSymlinks(filepath.Join(x.dir, filepath.FromSlash(l)))
		if err != nil {
			return &EntryError{Entry: l, Err: fmt.Errorf("%w: does not resolve to a file of the archive", ErrLinkEscape)}
		}
		if rel, err := filepath.Rel(realDir, p); err != nil || !(rel == "." || filepath.IsLocal(rel)) {
			return &EntryError{Entry: l, Err: fmt.Errorf("%w: resolves to %s", ErrLinkEscape, p)}
		}
	}
	return nil
}

// extractZip extracts a zip (a .mar) into x.
func extractZip(r io.ReaderAt, size int64, x *extractor) error {
	zr, err := zip.NewReader(r, size)
	// ErrInsecurePath comes with a usable reader; the names are checked below.
	if err != nil && !errors.Is(err, zip.ErrInsecurePath) {
		return fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if x.limits.MaxFiles >= 0 && len(zr.File) > x.limits.MaxFiles {
		return fmt.Errorf("%w (%d entries, limit %d)", ErrTooManyFiles, len(zr.File), x.limits.MaxFiles)
	}
	for _, f := range zr.File {
		if err := x.zipEntry(f); err != nil {
			return &EntryError{Entry: f.Name, Err: err}
		}
	}
	return x.finish()
}

func (x *extractor) zipEntry(f *zip.File) error {
	if err := x.count(); err != nil {
		return err
	}
	name, err := entryName(f.Name)
	if err != nil || name == "" {
		return err
	}
	mode := f.Mode()
	switch {
	case mode.IsDir() || strings.HasSuffix(f.Name, "/"):
		return x.dirEntry(name)
	case mode&fs.ModeSymlink != 0:
		rc, err := f.Open()
		if err != nil {
			return corrupt(err)
		}
		defer rc.Close()
		target, err := io.ReadAll(io.LimitReader(rc, maxLinkTarget+1))
		if err != nil {
			return corrupt(err)
		}
		if len(target) > maxLinkTarget {
			return fmt.Errorf("%w: link target longer than %d bytes", ErrLinkEscape, maxLinkTarget)
		}
		return x.symlink(name, string(target))
	case mode.IsRegular():
		rc, err := f.Open()
		if err != nil {
			return corrupt(err)
		}
		defer rc.Close()
		return x.file(name, rc, int64(min(f.UncompressedSize64, 1<<62)))
	}
	return fmt.Errorf("%w: %v", ErrUnsupportedEntry, mode.Type())
}

// extractTarGz extracts a gzip-compressed tar into x. Entry names are kept
// whole; Open strips a single top-level directory afterwards.
func extractTarGz(r io.Reader, x *extractor) error {
	gz, err := gzip.NewReader(r)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	defer gz.Close()
	// Headers, padding and skipped entries decompress too, so the stream
	// itself is bounded: the files' limit plus room for 1.5 KiB of headers
	// per entry and 1 MiB of PAX records.
	var src io.Reader = gz
	if x.limits.MaxTotalBytes >= 0 && x.limits.MaxFiles >= 0 {
		src = &cappedReader{r: gz, left: x.limits.MaxTotalBytes + int64(x.limits.MaxFiles+20)*1536 + 1<<20}
	}
	tr := tar.NewReader(src)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		// ErrInsecurePath comes with a usable header; the name is checked below.
		if err != nil && !errors.Is(err, tar.ErrInsecurePath) {
			return corrupt(err)
		}
		if err := x.tarEntry(h, tr); err != nil {
			return &EntryError{Entry: h.Name, Err: err}
		}
	}
	// Read to the end so a damaged gzip trailer (CRC, length) is noticed.
	if _, err := io.Copy(io.Discard, src); err != nil {
		return corrupt(err)
	}
	return x.finish()
}

func (x *extractor) tarEntry(h *tar.Header, r io.Reader) error {
	if h.Typeflag == tar.TypeXGlobalHeader {
		return nil // PAX defaults for later entries; Go's reader applies them
	}
	if err := x.count(); err != nil {
		return err
	}
	name, err := entryName(h.Name)
	if err != nil || name == "" {
		return err
	}
	switch h.Typeflag {
	case tar.TypeDir:
		return x.dirEntry(name)
	case tar.TypeReg, '\x00': // '\x00' is the pre-POSIX regular file
		return x.file(name, r, h.Size)
	case tar.TypeSymlink:
		return x.symlink(name, h.Linkname)
	case tar.TypeLink:
		return x.hardlink(name, h.Linkname)
	}
	return fmt.Errorf("%w: tar type %q", ErrUnsupportedEntry, h.Typeflag)
}

// cappedReader fails with ErrArchiveTooLarge once more than left bytes were read.
type cappedReader struct {
	r    io.Reader
	left int64
}

func (c *cappedReader) Read(p []byte) (int, error) {
	if c.left < 0 {
		return 0, fmt.Errorf("%w: decompressed stream too long", ErrArchiveTooLarge)
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	if c.left < 0 {
		return n, fmt.Errorf("%w: decompressed stream too long", ErrArchiveTooLarge)
	}
	return n, err
}
