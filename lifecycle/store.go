package lifecycle

import (
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/torchd/torchd/core"
)

// The repository API's control of the model store, when there is no Triton model
// repository: explicit mode loads the store's archive of a model's name and unloads every
// version of it, as Triton refuses load and unload under --model-control-mode none or poll.

// storeLoad loads a model store archive through the repository API.
func (s *Service) storeLoad(name string, config []byte) error {
	if err := s.storeControl("load"); err != nil {
		return err
	}
	if config != nil {
		return core.Errorf(core.ErrBadInput, "a config override is for a Triton model repository (--model-repository); a model store archive carries its own config")
	}
	if _, err := s.reg.Get(name, ""); err == nil {
		return nil // loaded already: left as it is
	}
	entry := s.storeEntry(name)
	if entry == "" {
		return core.Errorf(core.ErrModelNotFound, "no model %q in the model store", name)
	}
	_, err := s.Register(Registration{URL: entry, URLGiven: true, Name: name, Synchronous: true})
	return err
}

// storeUnload unloads every version of a model through the repository API, once the
// requests it has accepted are answered; the index lists them as unloaded.
func (s *Service) storeUnload(name string) error {
	if err := s.storeControl("unload"); err != nil {
		return err
	}
	versions, def, err := s.reg.Versions(name)
	if err != nil {
		return err
	}
	// The default version goes last: the registry keeps it while others remain.
	sort.SliceStable(versions, func(i, j int) bool { return versions[j].Version == def })
	for _, v := range versions {
		if err := s.Unregister(name, v.Version); err != nil {
			return err
		}
		s.records.setReason(name, v.Version, "unloaded")
	}
	return nil
}

// storeControl refuses the repository API's load and unload of model store archives unless
// model control is explicit.
func (s *Service) storeControl(op string) error {
	if s.mode != ControlExplicit {
		return core.Errorf(core.ErrControlOff,
			"model control is off: start torchd with --model-control-mode explicit to %s models through the repository API (the management API on its own port registers and unregisters them)", op)
	}
	return nil
}

// storeModels are the model names the model store offers: its archives and directories,
// named as the repository API's load finds them.
func (s *Service) storeModels() []string {
	entries, _ := os.ReadDir(s.store)
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
func (s *Service) storeEntry(name string) string {
	if name == "" || strings.ContainsAny(name, "/\\") || strings.Contains(name, "..") {
		return ""
	}
	for _, ext := range storeExts {
		fi, err := os.Stat(filepath.Join(s.store, name+ext))
		if err == nil && (ext != "" || fi.IsDir()) {
			return name + ext
		}
	}
	return ""
}
