package lifecycle

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/core"
)

// The service's tests serve the zoo's digits CNN (models/out, made by `make models`) from a
// model store of directory archives, over real LibTorch.

// testStore writes a model store holding digits (a directory archive of the zoo's digits
// CNN behind the tensor handler) and returns it.
func testStore(t *testing.T) string {
	t.Helper()
	model, err := filepath.Abs(filepath.Join("..", "models", "out", "digits", "model.pt"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(model); err != nil {
		t.Fatalf("no zoo model (run make models): %v", err)
	}
	store := t.TempDir()
	dir := filepath.Join(store, "digits")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(model, filepath.Join(dir, "model.pt")); err != nil {
		t.Fatal(err)
	}
	toml := "handler = \"tensor\"\n[[inputs]]\nname = \"input__0\"\ndtype = \"float32\"\nshape = [-1, 1, 28, 28]\n"
	if err := os.WriteFile(filepath.Join(dir, "model-config.toml"), []byte(toml), 0o644); err != nil {
		t.Fatal(err)
	}
	return store
}

// storeOpener opens a registration's URL in store, as the daemon's URL resolution does for
// a plain name: the registration's name, else the archive's.
func storeOpener(reg *core.Registry, store string) func(core.RegisterRequest) (*core.ModelVersion, error) {
	return func(req core.RegisterRequest) (*core.ModelVersion, error) {
		am, err := archive.Open(filepath.Join(store, req.URL))
		if err != nil {
			return nil, core.Errorf(core.ErrBadModel, "%s: %v", req.URL, err)
		}
		name := req.Name
		if name == "" {
			name = am.Name
		}
		return reg.Add(name, am.Version, req, am)
	}
}

// testService is a service over a fresh registry and store, with a snapshot file in a
// directory of its own when snapshot is true.
func testService(t *testing.T, store, mode, snapshot string) (*Service, *core.Registry) {
	t.Helper()
	reg := testRegistry(t)
	s := New(Config{Registry: reg, Open: storeOpener(reg, store), ModelStore: store, ControlMode: mode, SnapshotFile: snapshot, Log: discard})
	t.Cleanup(s.Stop)
	return s, reg
}

// startAndWait starts st and waits for its loads.
func startAndWait(t *testing.T, s *Service, st Startup) {
	t.Helper()
	s.Start(st)
	s.WaitStartup()
}

// TestManagementAndSnapshot registers, scales, sets the default and unregisters through the
// service, and a second service restores the snapshot the first wrote; a registration that
// no longer loads is kept as a failed restore, in the index and the snapshot, until
// unregistered.
func TestManagementAndSnapshot(t *testing.T) {
	store := testStore(t)
	snap := filepath.Join(t.TempDir(), "snapshot.json")
	s, reg := testService(t, store, ControlNone, snap)
	startAndWait(t, s, Startup{})
	if !s.Ready() {
		t.Fatal("not ready with no start-up model")
	}
	if _, err := s.Register(Registration{URL: "digits", Name: "a", Synchronous: true, Runtime: "java"}); !errors.Is(err, core.ErrBadInput) {
		t.Fatalf("register with a runtime torchd has not: %v", err)
	}
	if _, err := s.Register(Registration{URLGiven: true, Synchronous: true}); !errors.Is(err, core.ErrModelNotFound) {
		t.Fatalf("register with an empty url: %v", err)
	}
	done, err := s.Register(Registration{URL: "digits", Name: "a", Synchronous: true})
	if err != nil || done.Name != "a" || done.Version != "1.0" || done.Workers != 1 {
		t.Fatalf("register: %+v %v", done, err)
	}
	if _, err := s.Register(Registration{URL: "digits", Name: "b", Synchronous: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Scale(Scaling{Name: "a", Min: archive.Of(2), Max: archive.Of(1)}); !errors.Is(err, core.ErrBadInput) {
		t.Fatalf("scale with max below min: %v", err)
	}
	if _, err := s.Scale(Scaling{Name: "nope", Min: archive.Of(-1)}); !errors.Is(err, core.ErrModelNotFound) {
		t.Fatalf("scale of a model not registered: %v", err)
	}
	// A negative count of a model that exists fails with no kind (the call is at fault, as
	// TorchServe answers it 500), and changes nothing.
	if _, err := s.Scale(Scaling{Name: "a", Min: archive.Of(-1)}); err == nil || errors.Is(err, core.ErrBadInput) || errors.Is(err, core.ErrModelNotFound) {
		t.Fatalf("scale to -1: %v", err)
	}
	sc, err := s.Scale(Scaling{Name: "a", Min: archive.Of(2), Synchronous: true})
	if err != nil || sc.Workers != 2 {
		t.Fatalf("scale: %+v %v", sc, err)
	}
	if v, _ := reg.Get("a", ""); v.Settings().MinWorkers != 2 {
		t.Fatalf("workers after scaling: %d", v.Settings().MinWorkers)
	}
	var file struct{ Models []SnapshotModel }
	b, err := os.ReadFile(snap)
	if err != nil || json.Unmarshal(b, &file) != nil || len(file.Models) != 2 || file.Models[0].Name != "a" || file.Models[0].Workers != 2 {
		t.Fatalf("snapshot %s: %v", b, err)
	}

	// b's archive goes away: the next start restores a, keeps b as a failed restore.
	if err := os.WriteFile(snap, []byte(`{"models": [`+string(mustJSON(t, file.Models[0]))+`, {"name": "b", "version": "1.0", "url": "gone", "batch_size": 1, "workers": 1}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	s2, reg2 := testService(t, store, ControlNone, snap)
	startAndWait(t, s2, Startup{})
	if v, err := reg2.Get("a", "1.0"); err != nil || v.Settings().MinWorkers != 2 {
		t.Fatalf("restored a: %v", err)
	}
	rs := s2.Restores()
	if len(rs) != 1 || rs[0].Name != "b" || rs[0].Restore == nil || rs[0].Restore.URL != "gone" || rs[0].Reason == "" {
		t.Fatalf("failed restores: %+v", rs)
	}
	if !s2.Ready() {
		t.Fatal("a failed restore made the server unhealthy")
	}
	idx := index(t, s2, false)
	if idx["a 1.0"] != "READY " || idx["b 1.0"] != "UNAVAILABLE "+rs[0].Reason {
		t.Fatalf("index: %q", idx)
	}
	// A change rewrites the snapshot with the failed restore and why it failed.
	if err := s2.SetDefault("a", "1.0"); err != nil {
		t.Fatal(err)
	}
	b, _ = os.ReadFile(snap)
	if json.Unmarshal(b, &file) != nil || len(file.Models) != 2 || file.Models[1].Failed != rs[0].Reason {
		t.Fatalf("snapshot after a change: %s", b)
	}
	if err := s2.Unregister("b", ""); err != nil {
		t.Fatalf("unregister a failed restore: %v", err)
	}
	if len(s2.Restores()) != 0 || index(t, s2, false)["b 1.0"] != "" {
		t.Fatalf("failed restore still listed: %+v", s2.Restores())
	}
	if err := s2.Unregister("b", ""); !errors.Is(err, core.ErrModelNotFound) {
		t.Fatalf("unregister twice: %v", err)
	}
	if err := s2.Unregister("a", ""); err != nil {
		t.Fatal(err)
	}
	b, _ = os.ReadFile(snap)
	if json.Unmarshal(b, &file) != nil || len(file.Models) != 0 {
		t.Fatalf("snapshot after unregistering all: %s", b)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestStartupModelFails: a models setting's model that fails to load is in the index with
// its reason and keeps the server unhealthy; the one that loads serves.
func TestStartupModelFails(t *testing.T) {
	store := testStore(t)
	s, reg := testService(t, store, ControlNone, "")
	startAndWait(t, s, Startup{Models: "digits, broken=missing.mar"})
	if _, err := reg.Get("digits", ""); err != nil {
		t.Fatal(err)
	}
	if s.Ready() {
		t.Fatal("ready with a start-up model that failed")
	}
	idx := index(t, s, false)
	if idx["digits 1.0"] != "READY " || len(idx["broken "]) <= len("UNAVAILABLE ") || idx["broken "][:12] != "UNAVAILABLE " {
		t.Fatalf("index: %q", idx)
	}
	if got := index(t, s, true); len(got) != 1 {
		t.Fatalf("ready index: %q", got)
	}
}

// TestModelStoreControl: without a Triton repository, explicit mode loads and unloads the
// model store's archives; the index lists an archive never loaded by its name alone, a
// loaded one READY, an unloaded one UNAVAILABLE with why, as Triton lists its models.
func TestModelStoreControl(t *testing.T) {
	store := testStore(t)
	s, reg := testService(t, store, ControlExplicit, "")
	startAndWait(t, s, Startup{})
	if idx := index(t, s, false); idx["digits "] != " " || len(idx) != 1 {
		t.Fatalf("index before a load: %q", idx)
	}
	for _, bad := range []struct {
		name string
		kind error
	}{{"nope", core.ErrModelNotFound}, {"../digits", core.ErrModelNotFound}, {"", core.ErrModelNotFound}} {
		if err := s.Load(bad.name, nil); !errors.Is(err, bad.kind) {
			t.Errorf("load %q: %v", bad.name, err)
		}
	}
	if err := s.Load("digits", []byte(`{}`)); !errors.Is(err, core.ErrBadInput) {
		t.Fatalf("load of a store archive with a config: %v", err)
	}
	if err := s.Load("digits", nil); err != nil {
		t.Fatal(err)
	}
	if idx := index(t, s, true); idx["digits 1.0"] != "READY " || len(idx) != 1 {
		t.Fatalf("index after the load: %q", idx)
	}
	if err := s.Unload("digits"); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Get("digits", ""); !errors.Is(err, core.ErrModelNotFound) {
		t.Fatalf("unloaded model still served: %v", err)
	}
	if idx := index(t, s, false); idx["digits 1.0"] != "UNAVAILABLE unloaded" || len(idx) != 1 {
		t.Fatalf("index after the unload: %q", idx)
	}
	if err := s.Unload("digits"); !errors.Is(err, core.ErrModelNotFound) {
		t.Fatalf("unload twice: %v", err)
	}
	if err := s.Load("digits", nil); err != nil {
		t.Fatal(err)
	}
	if idx := index(t, s, false); idx["digits 1.0"] != "READY " || len(idx) != 1 {
		t.Fatalf("index after loading again: %q", idx)
	}

	off, _ := testService(t, store, ControlNone, "")
	if err := off.Load("digits", nil); !errors.Is(err, core.ErrControlOff) {
		t.Fatalf("load with model control off: %v", err)
	}
	if err := off.Unload("digits"); !errors.Is(err, core.ErrControlOff) {
		t.Fatalf("unload with model control off: %v", err)
	}
}

// TestIndexStates: a version the registry holds with no worker is UNAVAILABLE, as ModelReady
// answers false for it, and not in the ready index.
func TestIndexStates(t *testing.T) {
	store := testStore(t)
	s, _ := testService(t, store, ControlNone, "")
	startAndWait(t, s, Startup{})
	if _, err := s.Register(Registration{URL: "digits", Name: "idle", Synchronous: true, Defaults: archive.Settings{MinWorkers: archive.Fixed(0)}}); err != nil {
		t.Fatal(err)
	}
	if idx := index(t, s, false); idx["idle 1.0"] != "UNAVAILABLE "+notWarm {
		t.Fatalf("index of a version without workers: %q", idx)
	}
	if idx := index(t, s, true); len(idx) != 0 {
		t.Fatalf("ready index: %q", idx)
	}
	if _, err := s.Scale(Scaling{Name: "idle", Min: archive.Of(1), Synchronous: true}); err != nil {
		t.Fatal(err)
	}
	if idx := index(t, s, true); idx["idle 1.0"] != "READY " {
		t.Fatalf("ready index after scaling up: %q", idx)
	}
}

// Once WaitStartup returns, readiness already counts the start-up as done: the health
// endpoints a test or a probe asks next must not see a start-up still in progress.
func TestReadyWhenWaitStartupReturns(t *testing.T) {
	reg := testRegistry(t)
	for i := range 2000 {
		s := New(Config{Registry: reg, Log: discard})
		s.Start(Startup{})
		s.WaitStartup()
		if !s.Ready() {
			t.Fatalf("try %d: not ready as WaitStartup returned, with no start-up model", i)
		}
		s.Stop()
	}
}
