package lifecycle

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"time"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/internal/jsonfile"
)

// Snapshots bring back the models registered through the management API after a restart,
// as TorchServe's config snapshots do. After every change made through the API (register,
// unregister, scale, set-default) torchd rewrites snapshot_file atomically with each such
// model version's registration and current settings; at start-up it registers them again,
// and /ping waits for them as for the start-up models. Models named by the models setting
// are not recorded: the setting brings them back itself. enable_snapshots = false switches
// both the writing and the reading off.

type snapshotFile struct {
	Saved  string          `json:"saved"`
	Models []SnapshotModel `json:"models"`
}

// SnapshotModel is a registration as the snapshot keeps it.
type SnapshotModel struct {
	Name            string  `json:"name"`
	Version         string  `json:"version"`
	URL             string  `json:"url"`
	Handler         string  `json:"handler,omitempty"`
	Default         bool    `json:"default"`
	BatchSize       int     `json:"batch_size"`
	MaxBatchDelayMS float64 `json:"max_batch_delay_ms"`
	Workers         int     `json:"workers"`
	MaxWorkers      int     `json:"max_workers"`
	ResponseTimeout float64 `json:"response_timeout_s"`
	AutoBatch       bool    `json:"auto_batch_size,omitempty"`
	AutoDelay       bool    `json:"auto_max_batch_delay,omitempty"`
	AutoWorkers     bool    `json:"auto_workers,omitempty"`
	LatencyTargetMS float64 `json:"latency_target_ms,omitempty"`
	// Threads is the intra-op threads per worker when set (0: cores / workers, or chosen by
	// workers = "auto").
	Threads int `json:"threads,omitempty"`
	// Precision is the registration's precision parameter, if it gave one.
	Precision string `json:"precision,omitempty"`
	// ForwardBatch is the registration's forward_batch parameter, if it gave one ("auto" or
	// a count).
	ForwardBatch string `json:"forward_batch,omitempty"`
	// Failed is why the registration failed to restore at the last start; it is tried again
	// at every start until it loads or is unregistered.
	Failed string `json:"failed,omitempty"`
}

// settings are the registration settings that bring m back as it was saved, each through
// archive.Settings.Set and its limits. A setting that was automatic is automatic again, not
// frozen at its value; a 0 that the snapshot writes for "not given" stays unset.
func (m SnapshotModel) settings() (archive.Settings, error) {
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	var s archive.Settings
	for _, x := range []struct {
		key   string
		v     any
		given bool
	}{
		{"batch_size", int64(m.BatchSize), m.BatchSize > 0},
		{"max_batch_delay", ms(m.MaxBatchDelayMS), true},
		{"min_workers", int64(m.Workers), true},
		{"max_workers", int64(m.MaxWorkers), m.MaxWorkers != 0},
		{"response_timeout", time.Duration(m.ResponseTimeout * float64(time.Second)), m.ResponseTimeout != 0},
		{"latency_target_ms", ms(m.LatencyTargetMS), m.LatencyTargetMS != 0},
		{"threads", int64(m.Threads), m.Threads != 0},
		{"precision", m.Precision, m.Precision != ""},
		{"forward_batch", forwardBatchValue(m.ForwardBatch), m.ForwardBatch != ""},
		{"batch_size", "auto", m.AutoBatch},
		{"max_batch_delay", "auto", m.AutoDelay},
		{"min_workers", "auto", m.AutoWorkers},
	} {
		if !x.given {
			continue
		}
		if err := s.Set(x.key, x.v); err != nil {
			return s, fmt.Errorf("snapshot setting %s: %v", x.key, err)
		}
	}
	return s, nil
}

func sortSnapshot(ms []SnapshotModel) {
	sort.Slice(ms, func(i, j int) bool {
		a, b := ms[i], ms[j]
		return a.Name < b.Name || a.Name == b.Name && a.Version < b.Version
	})
}

// saveSnapshot writes the API-registered models. It is called after each change through the
// management API; failures are logged, never fatal.
func (s *Service) saveSnapshot() {
	if s.snapshotFile == "" {
		return
	}
	s.snapMu.Lock()
	defer s.snapMu.Unlock()
	snap := snapshotFile{Saved: time.Now().UTC().Format(time.RFC3339), Models: []SnapshotModel{}}
	for _, e := range s.reg.List() {
		v, req := e.ModelVersion, e.Request()
		if v.State() == core.StateLoading || !req.Persist {
			continue
		}
		set := v.Settings()
		snap.Models = append(snap.Models, SnapshotModel{
			Name: v.Name, Version: v.Version, URL: v.URL, Handler: req.Handler, Default: e.Default,
			BatchSize: set.BatchSize, MaxBatchDelayMS: float64(set.MaxBatchDelay) / float64(time.Millisecond),
			Workers: set.MinWorkers, MaxWorkers: set.MaxWorkers, ResponseTimeout: set.ResponseTimeout.Seconds(),
			AutoBatch: set.Auto.BatchSize, AutoDelay: set.Auto.MaxBatchDelay, AutoWorkers: set.Auto.MinWorkers,
			LatencyTargetMS: float64(set.LatencyTarget) / float64(time.Millisecond),
			Threads:         req.Threads.V,
			Precision:       req.Precision.V,
			ForwardBatch:    snapshotTunable(req.ForwardBatch),
		})
	}
	for _, f := range s.Restores() {
		m := *f.Restore
		m.Failed = f.Reason
		snap.Models = append(snap.Models, m)
	}
	sortSnapshot(snap.Models)
	if err := jsonfile.Write(s.snapshotFile, snap); err != nil {
		s.log.Error("snapshot not written", "file", s.snapshotFile, "err", err)
	}
}

// readSnapshot returns the snapshot's models, grouped by name with the default version last
// so that registering them in order leaves the right default; none when there is no file.
func (s *Service) readSnapshot() ([]SnapshotModel, error) {
	if s.snapshotFile == "" {
		return nil, nil
	}
	b, err := os.ReadFile(s.snapshotFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var snap snapshotFile
	if err := json.Unmarshal(b, &snap); err != nil {
		return nil, fmt.Errorf("snapshot %s: %v", s.snapshotFile, err)
	}
	return snap.Models, nil
}

// restoreSnapshot registers a snapshot's models again, each model's versions in order on one
// goroutine and the models in parallel. A version that fails is logged and kept as failed
// with its entry (Record.Restore).
func (s *Service) restoreSnapshot(models []SnapshotModel) {
	byName := map[string][]SnapshotModel{}
	for _, m := range models {
		byName[m.Name] = append(byName[m.Name], m)
	}
	for name, versions := range byName {
		s.startupWG.Add(1)
		go func() {
			defer s.startupWG.Done()
			def := ""
			restored := 0
			for _, m := range versions {
				m.Failed = ""
				settings, err := m.settings()
				if err == nil {
					req := core.RegisterRequest{URL: m.URL, Name: m.Name, Handler: m.Handler, Synchronous: true, Startup: true, Persist: true,
						Settings: settings}
					_, err = s.open(req)
				}
				if err != nil {
					if errors.Is(err, core.ErrConflict) {
						s.log.Info("model from the snapshot already loaded by the models setting", "model", name, "version", m.Version)
						continue
					}
					s.log.Error("model from the snapshot failed to load; it stays in the snapshot, listed as FAILED, until unregistered", "model", name, "version", m.Version, "url", m.URL, "err", err)
					s.records.set(Record{Name: m.Name, Version: m.Version, Reason: err.Error(), Restore: &m})
					continue
				}
				restored++
				if m.Default {
					def = m.Version
				}
			}
			if def != "" {
				if err := s.reg.SetDefault(name, def); err != nil {
					s.log.Error("snapshot default version", "model", name, "err", err)
				}
			}
			if restored > 0 {
				s.log.Info("model restored from the snapshot", "model", name, "versions", restored, "failed", len(versions)-restored)
			}
		}()
	}
}

// snapshotTunable writes a registration's tunable count: "auto", the number, or "" when it
// gave none.
func snapshotTunable(t archive.Tunable[int]) string {
	if !t.Given() {
		return ""
	}
	return t.String()
}

// forwardBatchValue reads snapshotTunable's text back for Settings.Set: "auto" or a count
// (a string that is neither fails Set with its message).
func forwardBatchValue(s string) any {
	if n, err := strconv.Atoi(s); err == nil {
		return int64(n)
	}
	return s
}
