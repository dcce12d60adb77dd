package daemon

import (
	"sort"
	"strings"

	"github.com/torchd/torchd/core"
)

// Model control through the repository API (Triton's load and unload, over REST and gRPC):
// one gate for both protocols. A load or unload is a management action: it takes the
// management key when token authorization is on (repositoryControl, auth.go and grpc.go),
// and it is refused unless model control is explicit, as Triton refuses it under
// --model-control-mode none or poll. With a Triton repository the repository loads its
// model; without one, explicit mode loads the model store's archive of that name.

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

// repositoryLoad loads (or reloads) a model through the repository API.
func (d *Daemon) repositoryLoad(name string, config []byte) error {
	if d.Repository.ControlMode() != "" {
		return d.Repository.Load(name, config)
	}
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
	_, err := d.mgmt.Register(Registration{URL: entry, URLGiven: true, Name: name, Synchronous: true})
	return err
}

// repositoryUnload unloads every version of a model through the repository API, once the
// requests it has accepted are answered.
func (d *Daemon) repositoryUnload(name string) error {
	if d.Repository.ControlMode() != "" {
		return d.Repository.Unload(name)
	}
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
