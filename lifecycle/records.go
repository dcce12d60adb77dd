package lifecycle

import (
	"cmp"
	"slices"
	"sync"

	"github.com/torchd/torchd/core"
)

// Record is why a model version is not served, or what failed when it was last loaded:
// the one failure record. The index lists it, TorchServe's list and describe show the
// snapshot's, and a start-up model's keeps the server unhealthy.
type Record struct {
	Name    string
	Version string // "": the model as a whole (its config, or a registration whose version is unknown)
	Reason  string
	// Restore is the snapshot's registration that failed to load at start-up: it stays in
	// the snapshot, listed and described as FAILED, until unregistered or registered again
	// (a restart without, say, the allowed_urls that admitted it must not lose it for good).
	Restore *SnapshotModel
	// Startup marks a start-up model (the models setting, model_snapshot) that failed: the
	// server is not healthy.
	Startup bool
}

// records are the failure records by model name and version.
type records struct {
	mu sync.Mutex
	m  map[[2]string]Record
}

func (r *records) set(rec Record) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[[2]string]Record{}
	}
	r.m[[2]string{rec.Name, rec.Version}] = rec
}

// setReason records why name's version is not served, keeping what else was recorded.
func (r *records) setReason(name, version, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[[2]string]Record{}
	}
	k := [2]string{name, version}
	rec := r.m[k]
	rec.Name, rec.Version, rec.Reason = name, version, reason
	r.m[k] = rec
}

// reason is name's version's reason, or "".
func (r *records) reason(name, version string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.m[[2]string{name, version}].Reason
}

// clear forgets name's version.
func (r *records) clear(name, version string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.m, [2]string{name, version})
}

// removeRestores drops name's failed restores of version ("": every version) and reports
// whether there were any.
func (r *records) removeRestores(name, version string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	found := false
	for k, rec := range r.m {
		if rec.Restore != nil && rec.Name == name && (version == "" || rec.Version == version) {
			delete(r.m, k)
			found = true
		}
	}
	return found
}

// all returns the records that match keep, sorted by name and version.
func (r *records) all(keep func(Record) bool) []Record {
	r.mu.Lock()
	out := make([]Record, 0, len(r.m))
	for _, rec := range r.m {
		if keep == nil || keep(rec) {
			out = append(out, rec)
		}
	}
	r.mu.Unlock()
	slices.SortFunc(out, func(a, b Record) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), core.CompareVersions(a.Version, b.Version))
	})
	return out
}

// startupFailed reports whether a start-up model failed to load.
func (r *records) startupFailed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rec := range r.m {
		if rec.Startup {
			return true
		}
	}
	return false
}

// Restores are the snapshot's registrations that failed to load at start-up, sorted by name
// and version: TorchServe's list and describe show them as FAILED.
func (s *Service) Restores() []Record {
	return s.records.all(func(r Record) bool { return r.Restore != nil })
}
