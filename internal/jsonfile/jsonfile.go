// Package jsonfile writes a value as an indented JSON file, whole or not at all: through a
// temporary file and a rename, so that a reader (or a crash) never sees half of one.
package jsonfile

import (
	"encoding/json"
	"os"
	"path/filepath"
)

// Write writes v to path as indented JSON, creating path's directory if need be.
func Write(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if dir := filepath.Dir(path); dir != "." {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
