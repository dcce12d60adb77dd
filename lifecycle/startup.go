package lifecycle

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/core"
)

// Start-up models: the snapshot's registrations, the models setting's, config.properties'
// model_snapshot and a Triton repository's, loaded in the background after Start; the
// server is ready once they are done and none of them failed.

// Startup is what Start loads.
type Startup struct {
	// Models is the models setting: "all" (every archive of the model store), or a comma-
	// separated list of url or name=url.
	Models string
	// Versions are config.properties' model_snapshot versions: each model's in order, the
	// models in parallel.
	Versions []StartupVersion
	// LoadModels are the Triton repository's models to load in explicit mode ("*": all).
	LoadModels []string
	// PollEvery is how often poll mode reads the Triton repository.
	PollEvery time.Duration
}

// StartupVersion is one version that model_snapshot names.
type StartupVersion struct {
	Name, Version, URL string
	Default            bool // the model's default version
	Settings           archive.Settings
}

// Start loads the start-up models in the background: the snapshot's first, then the Triton
// repository's (and, in poll mode, follows the repository until Stop), model_snapshot's
// and the models setting's.
func (s *Service) Start(st Startup) {
	s.started.Store(true)
	defer func() {
		go func() { s.startupWG.Wait(); close(s.startupCh) }()
	}()
	if snap, err := s.readSnapshot(); err != nil {
		s.log.Error("snapshot not read; starting without it", "err", err)
	} else if len(snap) > 0 {
		s.log.Info("restoring models from the snapshot", "file", s.snapshotFile, "versions", len(snap))
		s.restoreSnapshot(snap)
	}
	if s.repo.dir != "" {
		s.startupWG.Add(1)
		go func() {
			defer s.startupWG.Done()
			s.loadRepository(st)
		}()
	}
	s.loadVersions(st.Versions)
	specs, err := s.startupSpecs(st.Models)
	if err != nil {
		s.log.Error("start-up models", "err", err)
		return
	}
	for _, sp := range specs {
		s.startupWG.Add(1)
		go func() {
			defer s.startupWG.Done()
			req := core.RegisterRequest{URL: sp.url, Name: sp.name, Startup: true, Synchronous: true}
			if _, err := s.open(req); err != nil {
				if errors.Is(err, core.ErrConflict) {
					// Registered through the API before a restart, and back from the snapshot.
					s.log.Info("start-up model already loaded from the snapshot", "url", sp.url, "msg", err.Error())
					return
				}
				s.log.Error("start-up model failed to load", "url", sp.url, "err", err)
				s.records.set(Record{Name: sp.recordName(), Reason: err.Error(), Startup: true})
			}
		}()
	}
}

// WaitStartup waits until every start-up model has loaded or failed, and Ready counts the
// start-up as done (the close of startupCh follows the loads on a goroutine of its own).
func (s *Service) WaitStartup() {
	s.startupWG.Wait()
	if s.started.Load() {
		<-s.startupCh
	}
}

// startupDone reports whether every start-up model has loaded or failed.
func (s *Service) startupDone() bool {
	select {
	case <-s.startupCh:
		return true
	default:
		return false
	}
}

// Ready reports whether every start-up model has loaded, none failed, and every model
// loaded at start-up is warm: the health of /ping, /v2/health/ready and gRPC's health.
func (s *Service) Ready() bool {
	return s.startupDone() && !s.records.startupFailed() && s.reg.Healthy()
}

// Stop waits for the start-up loads and ends the repository's poll.
func (s *Service) Stop() {
	s.startupWG.Wait()
	s.stopOnce.Do(func() { close(s.pollStop) })
	s.pollWG.Wait()
}

// loadRepository loads the Triton repository's start-up models, then in poll mode follows
// the repository until Stop. Models that fail are listed in the index with their reason;
// the rest serve.
func (s *Service) loadRepository(st Startup) {
	if err := s.repo.LoadStartup(st.LoadModels); err != nil {
		s.log.Error("model repository: some models are not served (see POST /v2/repository/index)", "err", err)
	}
	if s.mode != ControlPoll {
		return
	}
	s.pollWG.Add(1)
	go func() {
		defer s.pollWG.Done()
		tick := time.NewTicker(st.PollEvery)
		defer tick.Stop()
		for {
			select {
			case <-s.pollStop:
				return
			case <-tick.C:
				s.repo.Poll()
			}
		}
	}()
}

// loadVersions registers model_snapshot's versions: each model's in order, the models in
// parallel, and makes its default version the default. A version that fails makes the
// server unhealthy, as a start-up model does.
func (s *Service) loadVersions(versions []StartupVersion) {
	byName := map[string][]StartupVersion{}
	var names []string
	for _, m := range versions {
		if byName[m.Name] == nil {
			names = append(names, m.Name)
		}
		byName[m.Name] = append(byName[m.Name], m)
	}
	for _, name := range names {
		s.startupWG.Add(1)
		go func() {
			defer s.startupWG.Done()
			for _, m := range byName[name] {
				req := core.RegisterRequest{URL: m.URL, Name: m.Name, Startup: true, Synchronous: true, Settings: m.Settings}
				v, err := s.open(req)
				if err != nil {
					if errors.Is(err, core.ErrConflict) {
						s.log.Info("model_snapshot model already loaded", "model", name, "version", m.Version, "msg", err.Error())
						continue
					}
					s.log.Error("model_snapshot model failed to load", "model", name, "version", m.Version, "mar", m.URL, "err", err)
					s.records.set(Record{Name: name, Version: m.Version, Reason: err.Error(), Startup: true})
					continue
				}
				if m.Default {
					if err := s.reg.SetDefault(name, v.Version); err != nil {
						s.log.Error("model_snapshot default version", "model", name, "err", err)
					}
				}
			}
		}()
	}
}

type startupSpec struct{ name, url string }

// recordName names a start-up model that failed in the index: its name, else its URL's
// file name as the model store names it.
func (sp startupSpec) recordName() string {
	if sp.name != "" {
		return sp.name
	}
	base := filepath.Base(sp.url)
	for _, ext := range storeExts {
		if b, ok := strings.CutSuffix(base, ext); ok && ext != "" {
			return b
		}
	}
	return base
}

// startupSpecs reads the models setting.
func (s *Service) startupSpecs(models string) ([]startupSpec, error) {
	m := strings.TrimSpace(models)
	if m == "" {
		return nil, nil
	}
	if strings.EqualFold(m, "all") {
		entries, err := os.ReadDir(s.store)
		if err != nil {
			return nil, fmt.Errorf("model store: %w", err)
		}
		var out []startupSpec
		for _, e := range entries {
			n := e.Name()
			if strings.HasPrefix(n, ".") {
				continue
			}
			if e.IsDir() || strings.HasSuffix(n, ".mar") || strings.HasSuffix(n, ".tar.gz") || strings.HasSuffix(n, ".tgz") {
				out = append(out, startupSpec{url: n})
			}
		}
		sort.Slice(out, func(i, j int) bool { return out[i].url < out[j].url })
		return out, nil
	}
	var out []startupSpec
	for _, part := range strings.Split(m, ",") {
		if part = strings.TrimSpace(part); part == "" {
			continue
		}
		name, url, ok := strings.Cut(part, "=")
		if !ok {
			url, name = part, ""
		}
		out = append(out, startupSpec{name: name, url: url})
	}
	return out, nil
}
