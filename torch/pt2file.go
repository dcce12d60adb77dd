package torch

import (
	"archive/zip"
	"debug/elf"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strings"
)

// A .pt2 is a zip. Given one, LibTorch extracts the entries under the model's directory as
// they are named (data/aotinductor/model/../../x lands outside its directory), into an
// aotinductor_* directory that nothing removes if the process dies, and dlopens the compiled
// library unchecked: a library cut short maps pages past the file's end, and the first touch
// of one is a SIGBUS that takes the process down. So torchd reads the zip itself: every
// entry's name is checked before anything is written, the entries are extracted into a
// directory of torchd's (its sizes and CRC-32s checked against the zip's records as they are
// copied), the library's ELF structure is checked against the file, and LibTorch loads the
// directory in place, which it neither extracts nor removes.

// PackageDirPrefix begins the name of every directory a package is extracted to, in
// os.TempDir(), followed by the process id and "-": a start-up sweep (daemon/sweep.go)
// removes those of processes that are gone.
const PackageDirPrefix = "torchd-"

// packageDirPattern is the os.MkdirTemp pattern of this process's package directories.
func packageDirPattern() string { return fmt.Sprintf("%s%d-package-", PackageDirPrefix, os.Getpid()) }

// Limits on one package's extraction. Entries are counted while they are copied, never
// trusted from their headers.
const (
	maxPackageEntries  = 10000
	maxPackageBytes    = 64 << 30 // the biggest packages (an LLM's weights) are tens of GB
	maxPackageMetadata = 1 << 20
	// A package extracts to at most packageRatio times its own size, plus packageSlack:
	// torch writes packages uncompressed, so more is a zip bomb filling the disk.
	packageRatio = 16
)

// packageSlack is what a package may extract to beyond packageRatio times its size (a var
// for tests).
var packageSlack int64 = 1 << 30

// ErrBadPackage is wrapped by every error about a package's files: its zip, its names, its
// compiled library.
var ErrBadPackage = errors.New("torch: bad package")

func badPackage(file, format string, args ...any) error {
	return fmt.Errorf("%w %s: %s", ErrBadPackage, filepath.Base(file), fmt.Sprintf(format, args...))
}

// openPackage opens a package's zip and checks every entry: a relative name that stays in
// the directory it is extracted to, and a regular file or a directory.
func openPackage(file string) (*zip.ReadCloser, error) {
	if _, err := os.Stat(file); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("torch: package %s: no such file", file)
	} else if err != nil {
		return nil, fmt.Errorf("torch: package %s: cannot be read", file)
	}
	zr, err := zip.OpenReader(file)
	if err != nil && !errors.Is(err, zip.ErrInsecurePath) {
		return nil, badPackage(file, "package metadata: not a readable zip (%v)", err)
	}
	if len(zr.File) > maxPackageEntries {
		zr.Close()
		return nil, badPackage(file, "%d entries, more than the %d a package may hold", len(zr.File), maxPackageEntries)
	}
	for _, f := range zr.File {
		if err := checkEntry(f); err != nil {
			zr.Close()
			return nil, badPackage(file, "entry %q %v; the package is refused before anything is extracted", f.Name, err)
		}
	}
	return zr, nil
}

func checkEntry(f *zip.File) error {
	name := f.Name
	switch {
	case name == "" || strings.ContainsRune(name, 0):
		return errors.New("has no usable name")
	case strings.HasPrefix(name, "/") || strings.Contains(name, `\`) || len(name) >= 2 && name[1] == ':':
		return errors.New("is an absolute or Windows path")
	}
	for part := range strings.SplitSeq(name, "/") {
		if part == ".." {
			return errors.New("leaves the package's directory (..)")
		}
	}
	if m := f.Mode(); m&fs.ModeSymlink != 0 {
		return errors.New("is a symbolic link, which could point anywhere")
	} else if !m.IsRegular() && !m.IsDir() {
		return errors.New("is neither a file nor a directory")
	}
	return nil
}

// modelDir is where a model's files are in the zip: [<archive>/]data/aotinductor/<model>/.
func inModelDir(name, model string) bool {
	dir := path.Dir(name)
	rest, ok := strings.CutSuffix(dir, "data/aotinductor/"+model)
	return ok && (rest == "" || strings.Count(rest, "/") == 1 && strings.HasSuffix(rest, "/"))
}

// readMetadata reads the model's metadata from the zip: the JSON object of its
// *wrapper_metadata.json (an older package's *_metadata.json), as LibTorch's loader does.
func readMetadata(file string, zr *zip.ReadCloser, model string) (map[string]string, error) {
	var pick *zip.File
	for _, f := range zr.File {
		if !inModelDir(f.Name, model) {
			continue
		}
		if strings.HasSuffix(f.Name, "wrapper_metadata.json") {
			pick = f
			break
		}
		if pick == nil && strings.HasSuffix(f.Name, "_metadata.json") {
			pick = f
		}
	}
	if pick == nil {
		return nil, badPackage(file, "package metadata: no model %q (data/aotinductor/%s/*_metadata.json)", model, model)
	}
	rc, err := pick.Open()
	if err != nil {
		return nil, badPackage(file, "package metadata %s: %v", pick.Name, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, maxPackageMetadata+1))
	if err != nil {
		return nil, badPackage(file, "package metadata %s: %v", pick.Name, err)
	}
	if len(b) > maxPackageMetadata {
		return nil, badPackage(file, "package metadata %s is over %d bytes", pick.Name, maxPackageMetadata)
	}
	md := map[string]string{}
	if err := json.Unmarshal(b, &md); err != nil {
		return nil, badPackage(file, "package metadata %s: not a JSON object of strings (%v)", pick.Name, err)
	}
	return md, nil
}

// extractPackage writes the package's files into a new directory of this process's and
// returns it; the caller removes it. Every write goes through an os.Root, so a name the
// checks missed still cannot leave the directory.
func extractPackage(file string, zr *zip.ReadCloser) (_ string, err error) {
	dir, err := os.MkdirTemp("", packageDirPattern())
	if err != nil {
		return "", fmt.Errorf("torch: package %s: cannot make a directory to extract it to in %s", filepath.Base(file), os.TempDir())
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	root, err := os.OpenRoot(dir)
	if err != nil {
		return "", err
	}
	defer root.Close()
	fi, err := os.Stat(file)
	if err != nil {
		return "", fmt.Errorf("torch: package %s: cannot be read", file)
	}
	limit := min(maxPackageBytes, packageRatio*fi.Size()+packageSlack)
	var total int64
	for _, f := range zr.File {
		name := path.Clean(f.Name)
		if f.Mode().IsDir() {
			if err := root.MkdirAll(name, 0o700); err != nil {
				return "", badPackage(file, "entry %q: cannot create it", f.Name)
			}
			continue
		}
		if d := path.Dir(name); d != "." {
			if err := root.MkdirAll(d, 0o700); err != nil {
				return "", badPackage(file, "entry %q: cannot create its directory", f.Name)
			}
		}
		n, err := extractEntry(root, name, f, limit-total)
		total += n
		if err != nil {
			return "", badPackage(file, "entry %q: %v", f.Name, err)
		}
	}
	return dir, nil
}

// extractEntry copies one file, at most limit bytes. The zip reader checks the size and
// CRC-32 that the package records for the entry when it reaches the end.
func extractEntry(root *os.Root, name string, f *zip.File, limit int64) (int64, error) {
	rc, err := f.Open()
	if err != nil {
		return 0, fmt.Errorf("unreadable (%v)", err)
	}
	defer rc.Close()
	w, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return 0, errors.New("cannot be written (a duplicate entry?)")
	}
	n, err := io.Copy(w, io.LimitReader(rc, limit+1))
	if cerr := w.Close(); err == nil && cerr != nil {
		return n, errors.New("cannot be written (is the disk full?)")
	}
	switch {
	case errors.Is(err, zip.ErrChecksum), errors.Is(err, zip.ErrFormat), errors.Is(err, io.ErrUnexpectedEOF):
		return n, errors.New("damaged: its bytes do not match the size and CRC-32 the package records")
	case err != nil:
		return n, fmt.Errorf("unreadable (%v)", err)
	case n > limit:
		return n, fmt.Errorf("the package extracts to more than %d times its size plus %d MiB, or %d GiB (a zip bomb?)", packageRatio, packageSlack>>20, maxPackageBytes>>30)
	}
	return n, nil
}

// checkLibraries checks each compiled library of the model in the extracted package.
func checkLibraries(file, dir string, zr *zip.ReadCloser, model string) error {
	found := false
	for _, f := range zr.File {
		if !inModelDir(f.Name, model) || !strings.HasSuffix(f.Name, ".so") || f.Mode().IsDir() {
			continue
		}
		found = true
		if err := checkELF(filepath.Join(dir, filepath.FromSlash(path.Clean(f.Name)))); err != nil {
			return badPackage(file, "compiled library %s %v; the package is damaged or was cut short (export it again)", path.Base(f.Name), err)
		}
	}
	if !found {
		return badPackage(file, "no compiled library (data/aotinductor/%s/*.so): torchd serves packages compiled ahead of time", model)
	}
	return nil
}

// elfMachine is the ELF machine of this host's libraries.
var elfMachine = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[runtime.GOARCH]

// checkELF checks that a shared library is whole before dlopen maps it: the loader maps its
// segments at their recorded offsets and sizes without comparing them with the file's, and
// a page past the end of the file faults (SIGBUS) when first read. It checks the header, that
// the program and section header tables lie in the file, and that every segment's and
// section's bytes do.
func checkELF(file string) error {
	f, err := os.Open(file)
	if err != nil {
		return errors.New("cannot be opened")
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return errors.New("cannot be read")
	}
	size := uint64(fi.Size())
	var h elf.Header64
	if err := binary.Read(io.NewSectionReader(f, 0, int64(size)), binary.LittleEndian, &h); err != nil {
		return fmt.Errorf("is %d bytes, too short for an ELF header", size)
	}
	if string(h.Ident[:4]) != elf.ELFMAG {
		return errors.New("is not an ELF file")
	}
	if elf.Class(h.Ident[elf.EI_CLASS]) != elf.ELFCLASS64 || elf.Data(h.Ident[elf.EI_DATA]) != elf.ELFDATA2LSB {
		return errors.New("is not a 64-bit little-endian ELF file")
	}
	if elf.Type(h.Type) != elf.ET_DYN {
		return fmt.Errorf("is an ELF %v, not a shared library", elf.Type(h.Type))
	}
	if elfMachine != 0 && elf.Machine(h.Machine) != elfMachine {
		return fmt.Errorf("is for %v, not this machine (%v)", elf.Machine(h.Machine), elfMachine)
	}
	if err := inFile("program header table", h.Phoff, uint64(h.Phnum)*uint64(h.Phentsize), size); err != nil {
		return err
	}
	if h.Shnum > 0 {
		if err := inFile("section header table", h.Shoff, uint64(h.Shnum)*uint64(h.Shentsize), size); err != nil {
			return err
		}
	}
	ef, err := elf.NewFile(f)
	if err != nil {
		return errors.New("has malformed ELF headers")
	}
	defer ef.Close()
	for i, p := range ef.Progs {
		if err := inFile(fmt.Sprintf("segment %d (%v)", i, p.Type), p.Off, p.Filesz, size); err != nil {
			return err
		}
		if p.Type == elf.PT_LOAD && p.Filesz > p.Memsz {
			return fmt.Errorf("has a segment %d whose file size exceeds its memory size", i)
		}
	}
	for _, s := range ef.Sections {
		if s.Type == elf.SHT_NOBITS || s.Type == elf.SHT_NULL {
			continue
		}
		if err := inFile("section "+s.Name, s.Offset, s.FileSize, size); err != nil {
			return err
		}
	}
	return nil
}

// inFile checks that n bytes at off lie within a file of size bytes, without overflow.
func inFile(what string, off, n, size uint64) error {
	if off > size || n > size-off {
		return fmt.Errorf("is truncated: its %s ends at byte %d, past the file's end (%d bytes)", what, off+n, size)
	}
	return nil
}
