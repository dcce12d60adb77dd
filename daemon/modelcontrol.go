package daemon

import (
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/frontend/torchserve"
	"github.com/torchd/torchd/repository"
)

// Model control through the repository API (Triton's load and unload, over REST and gRPC,
// package kserve): one gate for both protocols. A load or unload is a management action: it takes the
// management key when token authorization is on (repositoryControl, auth.go and grpc.go),
// and it is refused unless model control is explicit, as Triton refuses it under
// --model-control-mode none or poll. With a Triton repository the repository loads its
// model; without one, explicit mode loads the model store's archive of that name
// (modelStore).

// modelStore is the repository API's control of the model store when there is no Triton
// model repository: its index, loads and unloads (kserve.Store).
type modelStore struct{ d *Daemon }

// repositoryControlMethods are the gRPC calls, and repositoryControlPath tells the REST
// routes, that take the management key although they are served on the inference port.
var repositoryControlMethods = map[string]bool{
	"/inference.GRPCInferenceService/RepositoryModelLoad":   true,
	"/inference.GRPCInferenceService/RepositoryModelUnload": true,
}

func repositoryControlPath(p string) bool {
	rest, ok := strings.CutPrefix(p, "/v2/repository/models/")
	return ok && (strings.HasSuffix(rest, "/load") || strings.HasSuffix(rest, "/unload"))
}

// Load loads a model store archive through the repository API.
func (s modelStore) Load(name string, config []byte) error {
	d := s.d
	if err := d.storeControl("load"); err != nil {
		return err
	}
	if config != nil {
		return core.Errorf(core.ErrBadInput, "a config override is for a Triton model repository (--model-repository); a model store archive carries its own config")
	}
	if _, err := d.Registry.Get(name, ""); err == nil {
		return nil // loaded already: left as it is
	}
	entry := d.storeEntry(name)
	if entry == "" {
		return core.Errorf(core.ErrModelNotFound, "no model %q in the model store", name)
	}
	_, err := d.mgmt.Register(torchserve.Registration{URL: entry, URLGiven: true, Name: name, Synchronous: true})
	return err
}

// Unload unloads every version of a model through the repository API, once the
// requests it has accepted are answered.
func (s modelStore) Unload(name string) error {
	d := s.d
	if err := d.storeControl("unload"); err != nil {
		return err
	}
	versions, def, err := d.Registry.Versions(name)
	if err != nil {
		return err
	}
	// The default version goes last: the registry keeps it while others remain.
	sort.SliceStable(versions, func(i, j int) bool { return versions[j].Version == def })
	for _, v := range versions {
		if err := d.mgmt.Unregister(name, v.Version); err != nil {
			return err
		}
	}
	return nil
}

// storeControl refuses the repository API's load and unload of model store archives unless
// model control is explicit.
func (d *Daemon) storeControl(op string) error {
	if d.cfg.ModelControlMode != ControlExplicit {
		return core.Errorf(core.ErrControlOff,
			"model control is off: start torchd with --model-control-mode explicit to %s models through the repository API (the management API on its own port registers and unregisters them)", op)
	}
	return nil
}

// Index is the gRPC repository index without a model repository: the loaded versions,
// READY or UNAVAILABLE (no worker yet, or not warm), the registrations that failed, and the
// model store's archives not loaded.
func (s modelStore) Index(ready bool) []repository.Model {
	d := s.d
	var out []repository.Model
	loaded := map[string]bool{}
	for _, def := range d.Registry.Defaults() {
		name := def.Name
		loaded[name] = true
		versions, _, _ := d.Registry.Versions(name)
		for _, v := range versions {
			m := repository.Model{Name: name, Version: v.Version, State: "READY"}
			if !v.Ready() {
				m.State, m.Reason = "UNAVAILABLE", "not warm, or no worker"
			}
			if !ready || m.State == "READY" {
				out = append(out, m)
			}
		}
	}
	if ready {
		return out
	}
	for _, f := range d.failed.all() {
		out = append(out, repository.Model{Name: f.Name, Version: f.Version, State: "UNAVAILABLE", Reason: f.Failed})
	}
	for _, name := range d.storeModels() {
		if !loaded[name] {
			out = append(out, repository.Model{Name: name, State: "UNAVAILABLE", Reason: "unloaded"})
		}
	}
	return out
}

// storeModels are the model names the model store offers: its archives and directories,
// named as RepositoryModelLoad finds them.
func (d *Daemon) storeModels() []string {
	entries, _ := os.ReadDir(d.cfg.ModelStore)
	var out []string
	for _, e := range entries {
		n := e.Name()
		if strings.HasPrefix(n, ".") {
			continue
		}
		for _, ext := range storeExts {
			if base, ok := strings.CutSuffix(n, ext); ok && (ext != "" || e.IsDir()) {
				out = append(out, base)
				break
			}
		}
	}
	return out
}

// storeExts are the model store's archive forms, by their file name's end ("": a directory).
var storeExts = []string{".mar", ".tar.gz", ".tgz", ""}

// storeEntry is the model store's entry for a model name, or "".
func (d *Daemon) storeEntry(name string) string {
	if name == "" || strings.ContainsAny(name, "/\\") || strings.Contains(name, "..") {
		return ""
	}
	for _, ext := range storeExts {
		fi, err := os.Stat(filepath.Join(d.cfg.ModelStore, name+ext))
		if err == nil && (ext != "" || fi.IsDir()) {
			return name + ext
		}
	}
	return ""
}
