package daemon

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/torchd/torchd/core"
)

// Start-up models: the snapshot's registrations, the models setting's and a Triton
// repository's, loaded in the background after Start; /ping turns healthy once they are done.

// startupDone reports whether every start-up model has loaded or failed.
func (d *Daemon) startupDone() bool {
	select {
	case <-d.startupCh:
		return true
	default:
		return false
	}
}

// loadStartupModels registers the models named by the models setting, in parallel.
func (d *Daemon) loadStartupModels() {
	defer func() {
		go func() { d.startupWG.Wait(); close(d.startupCh) }()
	}()
	if snap, err := d.readSnapshot(); err != nil {
		d.log.Error("snapshot not read; starting without it", "err", err)
	} else if len(snap) > 0 {
		d.log.Info("restoring models from the snapshot", "file", d.cfg.SnapshotFile, "versions", len(snap))
		d.restoreSnapshot(snap)
	}
	if d.Repository.Dir() != "" {
		d.startupWG.Add(1)
		go func() {
			defer d.startupWG.Done()
			d.loadRepository()
		}()
	}
	d.loadTorchServeModels()
	specs, err := d.startupSpecs()
	if err != nil {
		d.log.Error("start-up models", "err", err)
		return
	}
	for _, s := range specs {
		d.startupWG.Add(1)
		go func() {
			defer d.startupWG.Done()
			req := RegisterRequest{URL: s.url, Name: s.name, Startup: true, Synchronous: true}
			if _, err := d.registerModel(req); err != nil {
				if errors.Is(err, core.ErrConflict) {
					// Registered through the API before a restart, and back from the snapshot.
					d.log.Info("start-up model already loaded from the snapshot", "url", s.url, "msg", err.Error())
					return
				}
				d.log.Error("start-up model failed to load", "url", s.url, "err", err)
				d.Registry.FailStartup(s.name, err)
			}
		}()
	}
}

type startupSpec struct{ name, url string }

func (d *Daemon) startupSpecs() ([]startupSpec, error) {
	m := strings.TrimSpace(d.cfg.Models)
	if m == "" {
		return nil, nil
	}
	if strings.EqualFold(m, "all") {
		entries, err := os.ReadDir(d.cfg.ModelStore)
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
	for _, part := range splitList(m) {
		name, url, ok := strings.Cut(part, "=")
		if !ok {
			url, name = part, ""
		}
		out = append(out, startupSpec{name: name, url: url})
	}
	return out, nil
}
