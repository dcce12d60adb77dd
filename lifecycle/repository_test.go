package lifecycle

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/backends/libtorch"
	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/repository"
)

// The tests serve the zoo's digits CNN (models/out, made by `make models`) from a Triton
// repository written the way Triton users write one.

const digitsConfig = `
name: "digits"
platform: "pytorch_libtorch"
max_batch_size: 8
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 1, 28, 28 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 10 ] } ]
`

// testRepository writes a repository of digits (version 1), broken (a config that does not
// parse) and nofile (a version directory without its model), served in explicit mode over a
// fresh registry.
func testRepository(t *testing.T) (*Service, *core.Registry) {
	t.Helper()
	return testRepositoryMode(t, ControlExplicit)
}

func testRepositoryMode(t *testing.T, mode string) (*Service, *core.Registry) {
	t.Helper()
	model, err := os.ReadFile(filepath.Join("..", "models", "out", "digits", "model.pt"))
	if err != nil {
		t.Fatalf("no zoo model (run make models): %v", err)
	}
	dir := t.TempDir()
	write := func(path string, b []byte) {
		p := filepath.Join(dir, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("digits/config.pbtxt", []byte(digitsConfig))
	write("digits/1/model.pt", model)
	write("broken/config.pbtxt", []byte("max_batch_size: {"))
	write("nofile/config.pbtxt", []byte(strings.Replace(digitsConfig, `"digits"`, `"nofile"`, 1)))
	write("nofile/1/README", []byte("no model here"))
	reg := testRegistry(t)
	p := New(Config{Registry: reg, ControlMode: mode, Log: discard})
	p.OpenRepository(dir)
	return p, reg
}

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// testRegistry is a registry over LibTorch with batches of one and one worker.
func testRegistry(t *testing.T) *core.Registry {
	t.Helper()
	reg := core.NewRegistry(core.Options{Log: discard, Runtimes: []core.Runtime{libtorch.Backend{}}, Defaults: archive.Settings{
		BatchSize: archive.Fixed(1), MaxBatchDelay: archive.Fixed(time.Duration(0)), MinWorkers: archive.Fixed(1),
		JobQueueSize: archive.Of(10), ResponseTimeout: archive.Of(time.Minute), StartupTimeout: archive.Of(time.Minute),
		Device: archive.Of("cpu"), Precision: archive.Of("fp32"),
	}})
	t.Cleanup(reg.Close)
	return reg
}

// index returns the index as "name version" → "STATE reason".
func index(t *testing.T, p *Service, ready bool) map[string]string {
	t.Helper()
	idx, err := p.Index(ready)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, m := range idx {
		out[m.Name+" "+m.Version] = m.State + " " + m.Reason
	}
	return out
}

// TestControl: load and unload need explicit control, and say which kind of error refused
// them.
func TestControl(t *testing.T) {
	p := New(Config{Registry: core.NewRegistry(core.Options{}), ControlMode: ControlNone})
	if err := p.Load("digits", nil); !errors.Is(err, core.ErrControlOff) {
		t.Fatalf("load of the model store's without explicit control: %v", err)
	}
	p = New(Config{Registry: core.NewRegistry(core.Options{}), ControlMode: ControlPoll})
	p.OpenRepository(t.TempDir())
	if err := p.Load("digits", nil); !errors.Is(err, core.ErrControlOff) {
		t.Fatalf("load in poll mode: %v", err)
	}
	if err := p.Unload("digits"); !errors.Is(err, core.ErrControlOff) {
		t.Fatalf("unload in poll mode: %v", err)
	}
}

// TestLifetimes follows versions through the registry: loaded, left alone when unchanged,
// unloaded, unregistered behind the repository's back; and the reasons of those not served.
func TestLifetimes(t *testing.T) {
	p, reg := testRepository(t)
	if got := index(t, p, false); got["digits "] != " " || got["broken "] != " " || len(got) != 3 {
		t.Fatalf("index before any load: %q", got)
	}
	if err := p.Load("digits", nil); err != nil {
		t.Fatal(err)
	}
	v, err := reg.Get("digits", "1")
	if err != nil {
		t.Fatal(err)
	}
	if a := repository.AdapterOf(v); a == nil || !a.Batched() || a.Platform() != "pytorch_libtorch" || a.Config(v).MaxBatchSize != 8 {
		t.Fatalf("the version's adapter: %+v", a)
	}
	if got := index(t, p, true); got["digits 1"] != "READY " || len(got) != 1 {
		t.Fatalf("ready index: %q", got)
	}
	if err := p.Load("digits", nil); err != nil {
		t.Fatal(err)
	}
	if again, _ := reg.Get("digits", "1"); again != v {
		t.Fatal("an unchanged version was reloaded")
	}

	if err := p.Load("broken", nil); !errors.Is(err, core.ErrBadModel) {
		t.Fatalf("load of a config that does not parse: %v", err)
	}
	if err := p.Load("nofile", nil); !errors.Is(err, core.ErrBadModel) {
		t.Fatalf("load of a version without its model: %v", err)
	}
	got := index(t, p, false)
	if !strings.HasPrefix(got["broken "], "UNAVAILABLE config.pbtxt:") {
		t.Fatalf("broken model: %q", got["broken "])
	}
	if got["nofile 1"] != "UNAVAILABLE version 1 has no model.pt" {
		t.Fatalf("version without its model: %q", got["nofile 1"])
	}

	// A version whose file goes away serves on from what was loaded, and says why.
	model := filepath.Join(p.RepositoryDir(), "digits", "1", "model.pt")
	b, err := os.ReadFile(model)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(model); err != nil {
		t.Fatal(err)
	}
	if err := p.Load("digits", nil); !errors.Is(err, core.ErrBadModel) {
		t.Fatalf("reload of a version without its model: %v", err)
	}
	if again, _ := reg.Get("digits", "1"); again != v {
		t.Fatal("a failed reload replaced the version")
	}
	if got := index(t, p, false)["digits 1"]; got != "READY serving the files loaded before; the new ones fail: version 1 has no model.pt" {
		t.Fatalf("version whose reload failed: %q", got)
	}
	if err := os.WriteFile(model, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := p.Load("digits", nil); err != nil {
		t.Fatal(err)
	}
	if got := index(t, p, false)["digits 1"]; got != "READY " {
		t.Fatalf("version whose file came back: %q", got)
	}

	if err := p.Unload("digits"); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Get("digits", "1"); !errors.Is(err, core.ErrModelNotFound) {
		t.Fatalf("unloaded version still served: %v", err)
	}
	if got := index(t, p, false)["digits 1"]; got != "UNAVAILABLE unloaded" {
		t.Fatalf("unloaded version: %q", got)
	}
	if err := p.Unload("never"); !errors.Is(err, core.ErrBadInput) {
		t.Fatalf("unload of a model never loaded: %v", err)
	}

	// The registry is the owner: a version it drops is not served, whoever dropped it.
	if err := p.Load("digits", nil); err != nil {
		t.Fatal(err)
	}
	v, _ = reg.Get("digits", "1")
	reg.Retire(v)
	if got := index(t, p, false)["digits 1"]; got != "UNAVAILABLE unloaded through the management API" {
		t.Fatalf("version the registry dropped: %q", got)
	}
}

// TestPollFollowsTheRepository: poll mode loads every model at start, then unloads what
// leaves the directory.
func TestPollFollowsTheRepository(t *testing.T) {
	p, reg := testRepositoryMode(t, ControlPoll)
	if err := p.repo.LoadStartup(nil); !errors.Is(err, core.ErrBadModel) {
		t.Fatalf("start-up with two models that cannot be served: %v", err)
	}
	if _, err := reg.Get("digits", "1"); err != nil {
		t.Fatal(err)
	}
	p.Poll() // nothing changed
	if got := index(t, p, true); got["digits 1"] != "READY " {
		t.Fatalf("after a poll with no change: %q", got)
	}
	if err := os.RemoveAll(filepath.Join(p.RepositoryDir(), "digits")); err != nil {
		t.Fatal(err)
	}
	p.Poll()
	if _, err := reg.Get("digits", "1"); !errors.Is(err, core.ErrModelNotFound) {
		t.Fatalf("a model removed from the repository is still served: %v", err)
	}
	if got := index(t, p, false)["digits 1"]; got != "UNAVAILABLE removed from the repository" {
		t.Fatalf("removed model: %q", got)
	}
}
