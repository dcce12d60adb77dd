package jsonfile

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// Write makes the directory, leaves no temporary file, and replaces what was there; a value
// JSON cannot encode and a directory that cannot be made are errors that leave the old file.
func TestWrite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a", "b", "v.json")
	if err := Write(path, map[string]int{"x": 1}); err != nil {
		t.Fatal(err)
	}
	if err := Write(path, map[string]int{"x": 2}); err != nil {
		t.Fatal(err)
	}
	var got map[string]int
	if b, err := os.ReadFile(path); err != nil || json.Unmarshal(b, &got) != nil || got["x"] != 2 {
		t.Fatalf("read back %v (%v)", got, err)
	}
	if _, err := os.Stat(path + ".tmp"); !os.IsNotExist(err) {
		t.Errorf("temporary file left: %v", err)
	}
	if err := Write(path, func() {}); err == nil {
		t.Error("a func: no error")
	}
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Write(filepath.Join(file, "v.json"), 1); err == nil {
		t.Error("under a file: no error")
	}
	if b, _ := os.ReadFile(path); json.Unmarshal(b, &got) != nil || got["x"] != 2 {
		t.Errorf("the file changed after failed writes: %s", b)
	}
}
