package lifecycle

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/torchd/torchd/archive/triton"
	"github.com/torchd/torchd/core"
)

// Model states in the repository index, as Triton's.
const (
	StateReady       = "READY"
	StateUnavailable = "UNAVAILABLE"
	StateLoading     = "LOADING"
	StateUnloading   = "UNLOADING"
)

// IndexEntry is one entry of the repository index: a model version and its state, or a
// model with no version state yet (never loaded: Version and State empty).
type IndexEntry struct {
	Name    string `json:"name"`
	Version string `json:"version,omitempty"`
	State   string `json:"state,omitempty"`
	Reason  string `json:"reason,omitempty"`
}

// String names a state for logs.
func (m IndexEntry) String() string {
	return strings.TrimSpace(fmt.Sprintf("%s %s %s %s", m.Name, m.Version, m.State, m.Reason))
}

// notWarm is the reason of a version the registry holds that cannot serve yet.
const notWarm = "not warm, or no worker"

// Index is the repository index that REST and gRPC both answer, with Triton's states: every
// model of the Triton repository with the state of its versions; every other version the
// registry holds (LOADING, READY, or UNAVAILABLE while it has no warm worker); every
// version recorded as not served (UNAVAILABLE with its reason); and, without a Triton
// repository, the model store's archives never loaded (a name alone, as Triton lists a
// model it has not loaded). With ready, only the READY versions.
func (s *Service) Index(ready bool) ([]IndexEntry, error) {
	var out []IndexEntry
	seen := map[string]bool{} // models the Triton repository lists
	if s.repo.dir != "" {
		idx, err := s.repo.index()
		if err != nil {
			return nil, err
		}
		for _, e := range idx {
			seen[e.Name] = true
			out = append(out, e)
		}
	}
	held := map[[2]string]bool{}
	named := map[string]bool{}
	for _, l := range s.reg.List() {
		held[[2]string{l.Name, l.Version}], named[l.Name] = true, true
		if seen[l.Name] {
			continue
		}
		e := IndexEntry{Name: l.Name, Version: l.Version, State: StateReady}
		switch {
		case l.State() == core.StateLoading:
			e.State = StateLoading
		case !l.Ready():
			e.State, e.Reason = StateUnavailable, notWarm
		}
		out = append(out, e)
	}
	for _, r := range s.records.all(nil) {
		// A whole model's record ("": its config, or a registration whose version is
		// unknown) stands only while none of its versions is held.
		if seen[r.Name] || held[[2]string{r.Name, r.Version}] || r.Version == "" && named[r.Name] {
			continue
		}
		named[r.Name] = true
		out = append(out, IndexEntry{Name: r.Name, Version: r.Version, State: StateUnavailable, Reason: r.Reason})
	}
	if s.repo.dir == "" {
		for _, name := range s.storeModels() {
			if !named[name] {
				out = append(out, IndexEntry{Name: name})
			}
		}
	}
	if ready {
		out = slices.DeleteFunc(out, func(e IndexEntry) bool { return e.State != StateReady })
	}
	slices.SortStableFunc(out, func(a, b IndexEntry) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), core.CompareVersions(a.Version, b.Version))
	})
	if out == nil {
		out = []IndexEntry{}
	}
	return out, nil
}

// index lists every model of the repository with the state of its versions. A version's
// state is the registry's (LOADING, READY); one the registry no longer holds is UNAVAILABLE
// with its record's reason.
func (p *modelRepository) index() ([]IndexEntry, error) {
	names, err := triton.List(p.dir)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for n := range p.models {
		if !slices.Contains(names, n) {
			names = append(names, n) // removed from disk, still known
		}
	}
	var out []IndexEntry
	for _, n := range names {
		out = append(out, p.states(n)...)
	}
	return out, nil
}

// states are a repository model's index entries; under p.mu.
func (p *modelRepository) states(name string) []IndexEntry {
	m := p.models[name]
	configReason := p.records.reason(name, "")
	if m == nil || len(m.versions) == 0 {
		if configReason != "" {
			return []IndexEntry{{Name: name, State: StateUnavailable, Reason: configReason}}
		}
		return []IndexEntry{{Name: name}} // never loaded
	}
	var out []IndexEntry
	for ver, v := range m.versions {
		reason := p.records.reason(name, ver)
		s := IndexEntry{Name: name, Version: ver, State: StateUnavailable, Reason: reason}
		st, held := p.reg.StateOf(name, ver)
		switch {
		case v.unloading:
			s.State, s.Reason = StateUnloading, ""
		case held && st == core.StateReady:
			// A reload that failed leaves what was loaded before serving.
			s.State, s.Reason = StateReady, ""
			if configReason != "" {
				s.Reason = "serving the previous config; the new one fails: " + configReason
			} else if reason != "" {
				s.Reason = "serving the files loaded before; the new ones fail: " + reason
			}
		case held:
			s.State, s.Reason = StateLoading, ""
		case s.Reason == "":
			s.Reason = "unloaded through the management API"
		}
		out = append(out, s)
	}
	return out
}
