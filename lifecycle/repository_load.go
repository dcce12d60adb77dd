package lifecycle

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/torchd/torchd/archive/triton"
	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/repository"
	"github.com/torchd/torchd/torch"
)

// interopOnce sets LibTorch's inter-op threads for the first repository model that asks,
// as the PyTorch backend does: the setting is process-wide, and fixed once used.
var interopOnce sync.Once

// load reads a model and brings the registry in line with it: new and changed versions are
// loaded (a changed version replaces the old once the new is warm), and versions the policy
// no longer selects are unloaded.
func (p *modelRepository) load(name string, config []byte) error {
	p.markPending(name, 1)
	defer p.markPending(name, -1)
	m := p.model(name)
	m.op.Lock()
	defer m.op.Unlock()
	tm := triton.Read(p.dir, name, config)
	if tm.Err == nil && p.mode == ControlExplicit {
		p.loadSteps(tm)
	}
	for _, w := range tm.Warnings {
		p.log.Warn("model repository: setting not honoured", "model", name, "warning", w)
	}
	if tm.Err != nil {
		// What is loaded keeps serving: a broken edit does not take a model down.
		p.records.setReason(name, "", tm.Err.Error())
		p.mu.Lock()
		m.stamp = tm.Stamp
		p.mu.Unlock()
		p.log.Error("model repository: model not served", "model", name, "err", tm.Err)
		return core.Errorf(core.ErrBadModel, "failed to load '%s': %v", name, tm.Err)
	}
	p.records.clear(name, "")
	var errs []error
	wanted := map[string]bool{}
	for _, ver := range tm.Versions {
		wanted[ver.Version] = true
		if ver.Err != nil {
			p.note(m, ver.Version, func(*version) {})
			p.records.setReason(name, ver.Version, ver.Err.Error())
			errs = append(errs, fmt.Errorf("version %s: %w", ver.Version, ver.Err))
			continue
		}
		if config == nil && p.unchanged(m, name, ver) {
			continue
		}
		if err := p.loadVersion(m, tm, ver); err != nil {
			errs = append(errs, fmt.Errorf("version %s: %w", ver.Version, err))
		}
	}
	if vs, _, err := p.reg.Versions(name); err == nil {
		for _, v := range vs {
			if !wanted[v.Version] {
				p.retire(m, v, "unloaded: the version policy no longer selects it")
			}
		}
	}
	p.reg.DefaultToHighest(name)
	p.mu.Lock()
	m.stamp = tm.Stamp
	p.mu.Unlock()
	if err := errors.Join(errs...); err != nil {
		return core.Errorf(core.ErrBadModel, "failed to load '%s': %v", name, err)
	}
	return nil
}

// unchanged tells whether the registry serves what this repository loaded for ver, from the
// same files; if so, a failure since (files that came back) is forgotten.
func (p *modelRepository) unchanged(m *model, name string, ver triton.Version) bool {
	old, ok := p.reg.Peek(name, ver.Version)
	if !ok {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	v := m.versions[ver.Version]
	if v == nil || v.served != old || v.stamp != ver.Stamp {
		return false
	}
	p.records.clear(name, ver.Version)
	return true
}

// loadVersion adds a version to the registry, or replaces the one it holds; a failed
// replacement leaves the old one serving.
func (p *modelRepository) loadVersion(m *model, tm *triton.Model, ver triton.Version) error {
	name := tm.Name
	old, _ := p.reg.Peek(name, ver.Version)
	am, err := tm.Archive(ver)
	if err != nil {
		p.note(m, ver.Version, func(*version) {})
		p.records.setReason(name, ver.Version, err.Error())
		return err
	}
	if n := am.Config.InteropThreads; n > 0 {
		interopOnce.Do(func() {
			if err := torch.SetNumInteropThreads(n); err != nil {
				p.log.Warn("INTER_OP_THREAD_COUNT not applied", "model", name, "err", err)
			}
		})
	}
	req := core.RegisterRequest{URL: am.Dir, Synchronous: true, Adapter: repository.NewAdapter(tm)}
	var served *core.ModelVersion
	if old == nil {
		served, err = p.reg.Add(name, ver.Version, req, am)
	} else {
		served, err = p.reg.Replace(old, req, am)
	}
	if err != nil {
		if old == nil {
			p.note(m, ver.Version, func(*version) {})
			p.records.setReason(name, ver.Version, err.Error())
		}
		p.log.Error("model repository: version not loaded", "model", name, "version", ver.Version, "err", err)
		return err
	}
	p.note(m, ver.Version, func(v *version) { *v = version{served: served, stamp: ver.Stamp} })
	p.records.clear(name, ver.Version)
	return nil
}

// unload unloads every version of a model.
func (p *modelRepository) unload(name, reason string) error {
	m := p.model(name)
	m.op.Lock()
	defer m.op.Unlock()
	vs, _, _ := p.reg.Versions(name)
	p.mu.Lock()
	known := len(m.versions) > 0
	p.mu.Unlock()
	if len(vs) == 0 && !known {
		return core.Errorf(core.ErrBadInput, "failed to unload '%s': the model is not loaded", name)
	}
	for _, v := range vs {
		p.retire(m, v, reason)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	m.stamp = ""
	for ver, v := range m.versions {
		// A version that failed keeps its reason; one unloaded otherwise takes this one.
		if p.records.reason(name, ver) == "" {
			p.records.setReason(name, ver, reason)
		}
		v.served = nil
	}
	return nil
}

// retire has the registry take a version out, answer its accepted requests and close it.
func (p *modelRepository) retire(m *model, mv *core.ModelVersion, reason string) {
	p.note(m, mv.Version, func(v *version) { v.unloading = true })
	p.reg.Retire(mv)
	p.note(m, mv.Version, func(v *version) { *v = version{} })
	p.records.setReason(mv.Name, mv.Version, reason)
	p.log.Info("model unloaded", "model", mv.Name, "version", mv.Version, "reason", reason)
}

// loadSteps loads an ensemble's models that the repository holds and the registry does not,
// as Triton loads an ensemble's composing models with it. A step that fails is the
// ensemble's load failure, which names it.
func (p *modelRepository) loadSteps(tm *triton.Model) {
	names, _ := triton.List(p.dir)
	for _, st := range tm.Config.GetEnsembleScheduling().GetStep() {
		if _, err := p.reg.Get(st.ModelName, ""); err == nil || !slices.Contains(names, st.ModelName) || st.ModelName == tm.Name {
			continue
		}
		// Nested ensembles are loaded by name, not through another's steps: two that name
		// each other would wait on each other's lock.
		if triton.Read(p.dir, st.ModelName, nil).Config.GetEnsembleScheduling() != nil {
			continue
		}
		if err := p.load(st.ModelName, nil); err != nil {
			p.log.Warn("model repository: an ensemble's model failed to load", "ensemble", tm.Name, "model", st.ModelName, "err", err)
		}
	}
}

// markPending counts a load of name in progress (n 1) or done (n -1).
func (p *modelRepository) markPending(name string, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pending == nil {
		p.pending = map[string]int{}
	}
	if p.pending[name] += n; p.pending[name] <= 0 {
		delete(p.pending, name)
	}
}

// Pending reports whether a model of the repository is being loaded, or is about to be at
// start-up (core.Options.Pending): an ensemble loading beside it waits for it.
func (p *modelRepository) Pending(name string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pending[name] > 0
}
