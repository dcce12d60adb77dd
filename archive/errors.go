package archive

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every error Open and Write return wraps one of these, so
// callers (and tests) can tell the failures apart with errors.Is.
var (
	// ErrPathTraversal: an entry name has a ".." component (zip-slip).
	ErrPathTraversal = errors.New(`path has a ".." component`)
	// ErrAbsolutePath: an entry name is absolute ("/etc/passwd", "C:\x").
	ErrAbsolutePath = errors.New("path is absolute")
	// ErrUnsafePath: an entry or file name is empty or holds a NUL byte.
	ErrUnsafePath = errors.New("empty path or NUL byte in path")
	// ErrLinkEscape: a symlink or hardlink points outside the extraction
	// directory, at something that is not in the archive, or an entry would be
	// written through a link.
	ErrLinkEscape = errors.New("link points outside the archive")
	// ErrDuplicateEntry: two entries have the same name, or one is the parent of the other.
	ErrDuplicateEntry = errors.New("name clashes with another entry")
	// ErrUnsupportedEntry: a device, FIFO, sparse file or other entry type torchd does not extract.
	ErrUnsupportedEntry = errors.New("unsupported entry type")
	// ErrFileTooLarge: one file is larger than Limits.MaxFileBytes.
	ErrFileTooLarge = errors.New("file larger than the per-file limit")
	// ErrArchiveTooLarge: the files together are larger than Limits.MaxTotalBytes.
	ErrArchiveTooLarge = errors.New("archive larger than the total size limit")
	// ErrTooManyFiles: the archive has more entries than Limits.MaxFiles.
	ErrTooManyFiles = errors.New("archive has more entries than the limit")
	// ErrCorrupt: the zip, gzip or tar stream is malformed or truncated.
	ErrCorrupt = errors.New("corrupt or truncated archive")

	// ErrUnknownFormat: Open was given a file that is not .mar, .tar.gz, .tgz or a TorchScript file.
	ErrUnknownFormat = errors.New("unknown model format")
	// ErrMissingManifest: a .mar has no MAR-INF/MANIFEST.json, or a directory
	// or .tar.gz has neither that nor a model-config.toml.
	ErrMissingManifest = errors.New("no MAR-INF/MANIFEST.json")
	// ErrMissingFile: the manifest or config names a file that is not in the archive.
	ErrMissingFile = errors.New("file not in the archive")
	// ErrUnsupportedHandler: the handler is a custom Python handler or a
	// built-in torchd does not have (see HandlerNames).
	ErrUnsupportedHandler = errors.New("unsupported handler")
	// ErrUnsupportedModel: the model is not a TorchScript file (an eager model
	// with modelFile, ONNX, an AOT-compiled .so, ...).
	ErrUnsupportedModel = errors.New("unsupported model")
	// ErrInvalidConfig: a key of MANIFEST.json, model-config.toml,
	// model-config.yaml or index_to_name.json is missing, unknown, or has a
	// wrong type or value. Every *ConfigError matches it.
	ErrInvalidConfig = errors.New("invalid model configuration")

	// ErrExists: Write would overwrite an existing archive and WriteOptions.Force is false.
	ErrExists = errors.New("already exists (use --force to overwrite)")
)

// EntryError is an archive entry that was refused. Err wraps one of the
// entry sentinels (ErrPathTraversal, ErrLinkEscape, ErrFileTooLarge, ...).
type EntryError struct {
	Entry string // the entry's name as written in the archive
	Err   error
}

func (e *EntryError) Error() string { return fmt.Sprintf("entry %q: %v", e.Entry, e.Err) }
func (e *EntryError) Unwrap() error { return e.Err }

// ConfigError is a bad value in one file of the archive. It names the file,
// the key, and what is allowed, e.g.
//
//	model-config.toml: batch_size: must be an integer >= 1, got 0
//
// It matches ErrInvalidConfig and whatever Err wraps (ErrMissingFile,
// ErrUnsupportedHandler, ...).
type ConfigError struct {
	File string // path inside the archive, e.g. "model-config.toml"; "" for a caller's option
	Key  string // dotted key, e.g. "model.serializedFile" or "inputs[0].dtype"; "" for the whole file
	Err  error
}

func (e *ConfigError) Error() string {
	switch {
	case e.File == "":
		return fmt.Sprintf("%s: %v", e.Key, e.Err)
	case e.Key == "":
		return fmt.Sprintf("%s: %v", e.File, e.Err)
	}
	return fmt.Sprintf("%s: %s: %v", e.File, e.Key, e.Err)
}

func (e *ConfigError) Unwrap() error        { return e.Err }
func (e *ConfigError) Is(target error) bool { return target == ErrInvalidConfig }

// configErr builds a *ConfigError whose Err is a formatted message; a %w in
// format keeps the wrapped sentinel visible to errors.Is.
func configErr(file, key, format string, args ...any) *ConfigError {
	return &ConfigError{File: file, Key: key, Err: fmt.Errorf(format, args...)}
}
