// Package core is torchd's serving core: the registry of model versions, each version's
// batcher and worker pool (over a Backend), and the one call that serves a request whatever
// its protocol (Registry.Serve). The protocol front-ends turn bytes into that call and its
// Result back into bytes, and answer its errors (the kinds of errors.go) each in their own
// terms; core knows no protocol. Nothing outside this package touches its locks or counters.
package core

import (
	"cmp"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/torchd/torchd/archive"
)

type modelEntry struct {
	versions       map[string]*ModelVersion
	defaultVersion string
}

// Options configure a registry.
type Options struct {
	// Defaults are the built-in per-model settings, below an archive's config; Server are
	// the ones the server's configuration set, above it (see Resolve).
	Defaults, Server archive.Settings
	// PerModel, when set, is the server configuration's settings for one model version
	// (config.properties' models key), above Server; startup: a start-up registration.
	PerModel func(name, version string, startup bool) archive.Settings
	// CacheDir holds the self-tuning's measured batching curves ("": not cached).
	CacheDir string
	// Pending reports whether a model not yet registered is being loaded (a repository's),
	// so that an ensemble loading beside its models waits for them. nil: none is.
	Pending func(name string) bool
	// Runtimes load the models that LibTorch, built in, does not: ONNX Runtime's, handler
	// processes'. The first that accepts a model loads it (Runtime.Accepts).
	Runtimes []Runtime
	// DispatchAlone sends a batch holding every request of its model at once instead of
	// waiting its max_batch_delay (Batcher.alone); false waits, as TorchServe and Triton do.
	DispatchAlone bool
	// Cores is the cores the workers' forwards share (0: GOMAXPROCS).
	Cores   int
	Metrics Recorder // nil: none
	Log     *slog.Logger
}

// Registry owns every loaded model version and its lifetime.
type Registry struct {
	opts    Options
	log     *slog.Logger
	metrics Recorder
	// cores is shared by every model's workers: a forward's threads depend on all forwards.
	cores *coreShare

	// serving counts the inference requests in Serve, every version's; lastServed is when
	// the latest ended (UnixNano).
	serving, lastServed atomic.Int64

	mu     sync.RWMutex
	models map[string]*modelEntry
}

// NewRegistry returns an empty registry.
func NewRegistry(o Options) *Registry {
	r := &Registry{opts: o, log: o.Log, metrics: o.Metrics, cores: newCoreShare(cmp.Or(o.Cores, cores())), models: map[string]*modelEntry{}}
	if r.metrics == nil {
		r.metrics = nothing{}
	}
	if r.log == nil {
		r.log = slog.Default()
	}
	return r
}

// Get returns a loaded model version; version "" is the default one.
func (r *Registry) Get(name, version string) (*ModelVersion, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	e, ok := r.models[name]
	if !ok {
		return nil, errorf(ErrModelNotFound, "Model not found: %s", name)
	}
	if version == "" {
		version = e.defaultVersion
		if version == "" {
			// A model gets its default version once its first version has loaded.
			return nil, errorf(ErrLoading, "Model %s is still loading", name)
		}
	}
	v, ok := e.versions[version]
	if !ok {
		return nil, errorf(ErrVersionNotFound, "Model version: %s does not exist for model: %s", version, name)
	}
	if !v.loaded() {
		return nil, errorf(ErrLoading, "Model %s version %s is still loading", name, version)
	}
	return v, nil
}

// Peek returns a loaded version, or false.
func (r *Registry) Peek(name, version string) (*ModelVersion, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if e := r.models[name]; e != nil {
		if v := e.versions[version]; v != nil && v.loaded() {
			return v, true
		}
	}
	return nil, false
}

// Versions returns a model's loaded versions sorted by version, and its default version.
func (r *Registry) Versions(name string) ([]*ModelVersion, string, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	e, ok := r.models[name]
	if !ok {
		return nil, "", errorf(ErrModelNotFound, "Model not found: %s", name)
	}
	out := make([]*ModelVersion, 0, len(e.versions))
	for _, v := range e.versions {
		if v.loaded() {
			out = append(out, v)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, e.defaultVersion, nil
}

// Defaults returns the default version of every model, sorted by name.
func (r *Registry) Defaults() []*ModelVersion {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]*ModelVersion, 0, len(r.models))
	for _, e := range r.models {
		if v := e.versions[e.defaultVersion]; v != nil && v.loaded() {
			out = append(out, v)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Listed is a version as List gives it.
type Listed struct {
	*ModelVersion
	Default bool
}

// List returns every version, the ones still loading included (State StateLoading, with
// only Name and Version set), sorted by name and version.
func (r *Registry) List() []Listed {
	r.mu.RLock()
	var out []Listed
	for _, e := range r.models {
		for ver, v := range e.versions {
			out = append(out, Listed{v, ver == e.defaultVersion})
		}
	}
	r.mu.RUnlock()
	slices.SortFunc(out, func(a, b Listed) int { return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.Version, b.Version)) })
	return out
}

// Loaded returns every loaded version.
func (r *Registry) Loaded() []*ModelVersion {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var out []*ModelVersion
	for _, e := range r.models {
		for _, v := range e.versions {
			if v.loaded() {
				out = append(out, v)
			}
		}
	}
	return out
}

// Healthy reports whether every model loaded at start-up is warm (one that failed to load is
// package lifecycle's record).
func (r *Registry) Healthy() bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, e := range r.models {
		for _, v := range e.versions {
			if v.Startup && v.State() != StateReady {
				return false
			}
		}
	}
	return true
}

// Add loads an opened archive as version of name, which must not be registered yet
// (ErrConflict). A failed load leaves nothing behind and closes the archive.
func (r *Registry) Add(name, version string, req RegisterRequest, am *archive.Model) (*ModelVersion, error) {
	if name == "" || strings.ContainsAny(name, "/ ") {
		am.Close()
		return nil, errorf(ErrBadInput, "invalid model name %q", name)
	}
	// Reserve the name and version before the slow load, so a concurrent duplicate gets 409.
	r.mu.Lock()
	e := r.models[name]
	if e != nil {
		if _, dup := e.versions[version]; dup {
			r.mu.Unlock()
			am.Close()
			return nil, errorf(ErrConflict, "Model version %s is already registered for model %s", version, name)
		}
	} else {
		e = &modelEntry{versions: map[string]*ModelVersion{}}
		r.models[name] = e
	}
	e.versions[version] = &ModelVersion{Name: name, Version: version} // StateLoading
	r.mu.Unlock()

	v, err := r.load(name, version, req, am)
	r.mu.Lock()
	if err != nil {
		r.metrics.Drop(name, version)
		delete(e.versions, version)
		if len(e.versions) == 0 {
			delete(r.models, name)
		}
	} else {
		e.versions[version] = v
		if e.defaultVersion == "" {
			e.defaultVersion = version
		}
	}
	r.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return v, nil
}

// Replace loads a new copy of a loaded version and swaps it in once it is warm; the old
// one answers what it has accepted, then closes. If the new copy fails, the old one stays.
func (r *Registry) Replace(old *ModelVersion, req RegisterRequest, am *archive.Model) (*ModelVersion, error) {
	v, err := r.load(old.Name, old.Version, req, am)
	if err != nil {
		// The failed copy took over the series both share; they report the old one again.
		r.metrics.Version(old)
		return nil, err
	}
	r.mu.Lock()
	e := r.models[old.Name]
	if e == nil || e.versions[old.Version] != old {
		r.mu.Unlock()
		v.close()
		return nil, errorf(ErrConflict, "model %s version %s changed while reloading", old.Name, old.Version)
	}
	e.versions[old.Version] = v
	r.mu.Unlock()
	old.drain()
	old.close()
	// The old pool's stop zeroed the series both share.
	v.metrics.Workers(v.pool.Count())
	r.log.Info("model reloaded", "model", v.Name, "version", v.Version)
	return v, nil
}

// Retire takes a version out of the registry, waits for its accepted requests, and closes
// it. When it was the default, the model's highest remaining version becomes the default.
func (r *Registry) Retire(v *ModelVersion) {
	r.mu.Lock()
	if e := r.models[v.Name]; e != nil && e.versions[v.Version] == v {
		delete(e.versions, v.Version)
		if len(e.versions) == 0 {
			delete(r.models, v.Name)
		} else if e.defaultVersion == v.Version {
			e.defaultVersion = ""
		}
	}
	r.mu.Unlock()
	r.DefaultToHighest(v.Name)
	v.drain()
	v.close()
	r.metrics.Drop(v.Name, v.Version)
}

// DefaultToHighest makes the highest loaded version (CompareVersions) the model's default,
// which is the version Triton serves a request that names none.
func (r *Registry) DefaultToHighest(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.models[name]
	if e == nil {
		return
	}
	best := ""
	for ver, v := range e.versions {
		if v.loaded() && (best == "" || CompareVersions(ver, best) > 0) {
			best = ver
		}
	}
	if best != "" {
		e.defaultVersion = best
	}
}

// Unregister removes a model version; version "" is the default. The default version cannot
// be removed while other versions exist (ErrDefaultVersion, as TorchServe).
func (r *Registry) Unregister(name, version string) error {
	r.mu.Lock()
	e, ok := r.models[name]
	if !ok {
		r.mu.Unlock()
		return errorf(ErrModelNotFound, "Model not found: %s", name)
	}
	if version == "" {
		version = e.defaultVersion
	}
	v, ok := e.versions[version]
	if !ok || !v.loaded() {
		r.mu.Unlock()
		return errorf(ErrVersionNotFound, "Model version: %s does not exist for model: %s", version, name)
	}
	if version == e.defaultVersion && len(e.versions) > 1 {
		r.mu.Unlock()
		return errorf(ErrDefaultVersion, "Cannot remove default version for model %s", name)
	}
	delete(e.versions, version)
	if len(e.versions) == 0 {
		delete(r.models, name)
	}
	r.mu.Unlock()
	v.close()
	r.metrics.Drop(name, version)
	r.log.Info("model unregistered", "model", name, "version", version)
	return nil
}

// SetDefault makes version the model's default.
func (r *Registry) SetDefault(name, version string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.models[name]
	if !ok {
		return errorf(ErrModelNotFound, "Model not found: %s", name)
	}
	if v, ok := e.versions[version]; !ok || !v.loaded() {
		return errorf(ErrVersionNotFound, "Model version: %s does not exist for model: %s", version, name)
	}
	e.defaultVersion = version
	return nil
}

// Scale sets a version's workers to minWorkers (TorchServe scales to min; max is recorded).
func (r *Registry) Scale(name, version string, minWorkers, maxWorkers int, wait bool) (*ModelVersion, error) {
	v, err := r.Get(name, version)
	if err != nil {
		return nil, err
	}
	// Handler processes follow the workers, one each. Scaling up starts them first, and a
	// handler that cannot load fails the scaling, as TorchServe's worker start does; the
	// version keeps the workers it had. Scaling down stops them after the workers.
	procs, _ := v.model.(ProcessScaler)
	if procs != nil && minWorkers > 0 {
		if err := procs.SetProcesses(minWorkers); err != nil {
			return nil, errorf(ErrLoadFailed, "failed to start workers for model %s version %s: handler %q: %v", name, v.Version, v.archive.PythonHandler, err)
		}
	}
	r.mu.Lock() // one Scale at a time: each copies the settings the last one stored
	s := v.Settings()
	s.MinWorkers, s.MaxWorkers = minWorkers, maxWorkers
	v.setSettings(s)
	r.mu.Unlock()
	v.pool.Scale(minWorkers, wait)
	if procs != nil && minWorkers == 0 {
		procs.SetProcesses(0) // only a closed model fails it, with nothing left to stop
	}
	if v.tuner != nil {
		// The workers' threads follow the count (cores / workers) unless they were set; a
		// thread count the tuner chose for the old count starts over from them.
		v.tuner.SetWorkers(minWorkers, v.pool.Threads())
	}
	return v, nil
}

// Close unregisters every model.
func (r *Registry) Close() {
	r.mu.Lock()
	var all []*ModelVersion
	for _, e := range r.models {
		for _, v := range e.versions {
			if v.loaded() {
				all = append(all, v)
			}
		}
	}
	r.models = map[string]*modelEntry{}
	r.mu.Unlock()
	var wg sync.WaitGroup
	for _, v := range all {
		wg.Add(1)
		go func() { defer wg.Done(); v.close() }()
	}
	wg.Wait()
}

// StateOf returns the state of a registered version, one still loading included, or false.
func (r *Registry) StateOf(name, version string) (State, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if e := r.models[name]; e != nil {
		if v := e.versions[version]; v != nil {
			return v.State(), true
		}
	}
	return 0, false
}
