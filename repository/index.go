package repository

import (
	"slices"
	"sort"

	"github.com/torchd/torchd/archive/triton"
	"github.com/torchd/torchd/core"
)

// Index lists every model of the repository with the state of its versions, and the models
// loaded from archives as READY; with ready, only the READY versions. A version's state is
// the registry's (LOADING, READY); one the registry no longer holds is UNAVAILABLE with the
// reason this repository remembers.
func (p *Repository) Index(ready bool) ([]Model, error) {
	var out []Model
	seen := map[string]bool{}
	loaded := map[[2]string]bool{}
	for _, v := range p.reg.Defaults() {
		vs, _, _ := p.reg.Versions(v.Name)
		for _, x := range vs {
			loaded[[2]string{x.Name, x.Version}] = true
		}
	}
	if p.dir != "" {
		names, err := triton.List(p.dir)
		if err != nil {
			return nil, err
		}
		p.mu.Lock()
		for n := range p.models {
			if !slices.Contains(names, n) {
				names = append(names, n) // removed from disk, still known
			}
		}
		for _, n := range names {
			seen[n] = true
			for _, s := range p.states(n) {
				if !ready || s.State == StateReady {
					out = append(out, s)
				}
			}
		}
		p.mu.Unlock()
	}
	for nv := range loaded {
		if !seen[nv[0]] {
			out = append(out, Model{Name: nv[0], Version: nv[1], State: StateReady})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Name != out[j].Name {
			return out[i].Name < out[j].Name
		}
		return core.CompareVersions(out[i].Version, out[j].Version) < 0
	})
	if out == nil {
		out = []Model{}
	}
	return out, nil
}

// states are a repository model's index entries; under p.mu.
func (p *Repository) states(name string) []Model {
	m := p.models[name]
	if m == nil || len(m.versions) == 0 {
		if m != nil && m.reason != "" {
			return []Model{{Name: name, State: StateUnavailable, Reason: m.reason}}
		}
		return []Model{{Name: name}} // never loaded
	}
	var out []Model
	for ver, v := range m.versions {
		s := Model{Name: name, Version: ver, State: StateUnavailable, Reason: v.reason}
		st, held := p.reg.StateOf(name, ver)
		switch {
		case v.unloading:
			s.State, s.Reason = StateUnloading, ""
		case held && st == core.StateReady:
			// A reload that failed leaves what was loaded before serving.
			s.State, s.Reason = StateReady, ""
			if m.reason != "" {
				s.Reason = "serving the previous config; the new one fails: " + m.reason
			} else if v.reason != "" {
				s.Reason = "serving the files loaded before; the new ones fail: " + v.reason
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
