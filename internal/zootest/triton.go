package zootest

import (
	"os"
	"path/filepath"
	"testing"
)

// TritonDigits is the digits CNN's Triton config, written as Triton users write one:
// <name>__<index> tensors, dynamic batching.
const TritonDigits = `
name: "digits"
platform: "pytorch_libtorch"
max_batch_size: 8
input [
  {
    name: "INPUT__0"
    data_type: TYPE_FP32
    dims: [ 1, 28, 28 ]
  }
]
output [
  {
    name: "OUTPUT__0"
    data_type: TYPE_FP32
    dims: [ 10 ]
  }
]
dynamic_batching {
  max_queue_delay_microseconds: 2000
}
instance_group [
  {
    count: 1
    kind: KIND_CPU
  }
]
`

// RepoModel writes a Triton repository's model: repo/name/config.pbtxt, and the zoo's
// model's file (zoo/model/file) in each version's directory.
func RepoModel(t testing.TB, zoo, repo, name, config, model, file string, versions ...string) {
	t.Helper()
	dir := filepath.Join(repo, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.pbtxt"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, v := range versions {
		CopyFile(t, filepath.Join(zoo, model, file), filepath.Join(dir, v, file))
	}
}

// CopyFile copies a file, making the directories it goes in. It writes then renames, as a
// deployment replaces a file: a repository's poll sees the old file or the new, never half.
func CopyFile(t testing.TB, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	tmp := to + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, to); err != nil {
		t.Fatal(err)
	}
}
