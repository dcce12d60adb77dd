package handlerproc

import (
	"fmt"
	"path/filepath"
	"time"

	"log/slog"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/core"
)

// pythonDeps installs an archive's requirements.txt for its handler processes when
// Options.InstallPyDeps allows it, as TorchServe's install_py_dep_per_model, and returns the
// processes' environment. When it does not, the file is left alone, the log says so, and
// skipped is a note for a start that then fails (the handler likely imports what it lists).
func (b *Backend) pythonDeps(lr core.LoadRequest, python string) (env []string, skipped string, err error) {
	name, am, s, log := lr.Name, lr.Archive, lr.Settings, lr.Log
	if log == nil {
		log = slog.Default()
	}
	file := am.Manifest.Model.RequirementsFile
	if file == "" {
		return nil, "", nil
	}
	path, err := am.Path(file)
	if err != nil {
		return nil, "", fmt.Errorf("its manifest names the requirements file %q, which the archive does not hold", file)
	}
	if !b.InstallPyDeps {
		log.Warn("the archive's requirements file is not installed: install_py_dep_per_model is off; install them into the handler runtime's environment, or turn it on",
			"model", name, "file", file)
		return nil, fmt.Sprintf(" (the archive's %s was not installed: install_py_dep_per_model is off)", file), nil
	}
	if am.Kind != archive.KindMAR && am.Kind != archive.KindTarGz {
		return nil, "", fmt.Errorf("install_py_dep_per_model installs requirements only for .mar and .tar.gz archives, which torchd extracts; install %s into the handler runtime's environment", file)
	}
	deps := DepsDir(am.Dir)
	start := time.Now()
	req := Requirements{Python: python, File: path, Target: deps, Timeout: s.StartupTimeout}
	if err := req.Install(); err != nil {
		return nil, "", err
	}
	log.Info("installed the archive's requirements", "model", name, "file", file, "dir", filepath.Base(deps), "time", time.Since(start).Round(time.Millisecond))
	return []string{PythonPath(am.Dir, deps)}, "", nil
}
