package core

import (
	"slices"
	"sync"
	"testing"

	"github.com/torchd/torchd/archive"
)

// A registry names its versions: a duplicate or a bad name is refused, a missing model or
// version says which, the default version cannot go while others remain, and the last
// version's removal removes the model.
func TestRegistryVersions(t *testing.T) {
	r := testRegistry(t, 0)
	addDigits(t, r, "d", "tensor", archive.Settings{})
	if _, err := r.Add("d", "1", RegisterRequest{}, zooArchive(t, "digits", "tensor", digitsConfig)); !errorIs(err, ErrConflict) {
		t.Errorf("a second version 1: %v, want ErrConflict", err)
	}
	if _, err := r.Add("a b", "1", RegisterRequest{}, zooArchive(t, "digits", "tensor", digitsConfig)); !errorIs(err, ErrBadInput) {
		t.Errorf("a name with a space: %v, want ErrBadInput", err)
	}
	errorContains(t, "unknown model", second(r.Get("nope", "")), ErrModelNotFound, "Model not found: nope")
	errorContains(t, "unknown version", second(r.Get("d", "9")), ErrVersionNotFound, "Model version: 9 does not exist for model: d")

	v2, err := r.Add("d", "2", RegisterRequest{}, zooArchive(t, "digits", "tensor", digitsConfig))
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := r.Get("d", ""); v.Version != "1" {
		t.Fatalf("default version %s, want the first registered, 1", v.Version)
	}
	if err := r.SetDefault("d", "2"); err != nil {
		t.Fatal(err)
	}
	if v, _ := r.Get("d", ""); v != v2 {
		t.Fatalf("default version %s after SetDefault 2", v.Version)
	}
	errorContains(t, "SetDefault to a missing version", r.SetDefault("d", "3"), ErrVersionNotFound, "3")
	errorContains(t, "removing the default", r.Unregister("d", "2"), ErrDefaultVersion, "Cannot remove default version for model d")
	vs, def, err := r.Versions("d")
	if err != nil || def != "2" || len(vs) != 2 || vs[0].Version != "1" || vs[1].Version != "2" {
		t.Fatalf("Versions: %v %q %v", vs, def, err)
	}
	if err := r.Unregister("d", "1"); err != nil {
		t.Fatal(err)
	}
	if err := r.Unregister("d", ""); err != nil {
		t.Fatal(err)
	}
	errorContains(t, "after the last version went", second(r.Get("d", "")), ErrModelNotFound, "d")
	if l := r.List(); len(l) != 0 {
		t.Fatalf("List after every version went: %v", l)
	}
}

// Scale changes the workers and the settings the front-ends read (describe, the snapshot,
// the web page) while they read them: under -race, a read that bypasses Settings shows up.
func TestScaleWhileSettingsAreRead(t *testing.T) {
	r := testRegistry(t, 0)
	v := addDigits(t, r, "d", "tensor", archive.Settings{})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				for _, e := range r.List() {
					_ = e.Settings().MinWorkers
				}
				_ = v.Settings().MaxWorkers
			}
		}()
	}
	for _, n := range []int{2, 1, 3, 1} {
		if _, err := r.Scale("d", "1", n, n+1, true); err != nil {
			t.Fatal(err)
		}
		if s := v.Settings(); s.MinWorkers != n || s.MaxWorkers != n+1 || v.WorkerCount() != n {
			t.Errorf("scaled to %d: settings %d..%d, %d workers", n, s.MinWorkers, s.MaxWorkers, v.WorkerCount())
		}
	}
	close(stop)
	wg.Wait()
	errorContains(t, "scaling an unknown model", second(r.Scale("nope", "", 1, 1, false)), ErrModelNotFound, "nope")
}

// Close unregisters every model; the registry lists nothing after it.
func TestRegistryClose(t *testing.T) {
	r := testRegistry(t, 0)
	addDigits(t, r, "a", "tensor", archive.Settings{})
	addSlow(t, r, "b", archive.Settings{})
	names := []string{}
	for _, v := range r.Defaults() {
		names = append(names, v.Name)
	}
	if !slices.Equal(names, []string{"a", "b"}) || !r.Healthy() {
		t.Fatalf("Defaults %v, healthy %v", names, r.Healthy())
	}
	r.Close()
	if l := r.Loaded(); len(l) != 0 {
		t.Fatalf("%d versions loaded after Close", len(l))
	}
}

func second[T any](_ T, err error) error { return err }

// StateOf reports a registered version's state, and nothing for one not registered or retired.
func TestRegistryStateOf(t *testing.T) {
	r := testRegistry(t, 0)
	if _, ok := r.StateOf("d", "1"); ok {
		t.Fatal("a state for a model never registered")
	}
	v := addDigits(t, r, "d", "tensor", archive.Settings{})
	if s, ok := r.StateOf("d", "1"); !ok || s != StateReady {
		t.Fatalf("a synchronous registration's state: %v %v", s, ok)
	}
	r.Retire(v)
	if _, ok := r.StateOf("d", "1"); ok {
		t.Fatal("a state for a retired version")
	}
}
