package handlerproc

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Requirements is an archive's requirements.txt (torch-model-archiver --requirements-file),
// which TorchServe installs per model when install_py_dep_per_model is true.
type Requirements struct {
	Python  string // the handler runtime's interpreter, whose pip installs them
	File    string // the requirements file, inside ModelDir
	Target  string // where they are installed; it goes first on the processes' PYTHONPATH
	Timeout time.Duration
}

// depsDir is where an archive's requirements go: inside its extraction, so that they go
// with it when the model is unregistered.
const depsDir = ".torchd-pydeps"

// DepsDir is the directory inside an extracted archive that its requirements are installed in.
func DepsDir(modelDir string) string { return filepath.Join(modelDir, depsDir) }

// Install runs `python -m pip install --target` on the requirements, in the model's directory
// (a requirement may name a file of the archive, such as a wheel). Its error carries pip's
// last lines.
func (r Requirements) Install() error {
	if err := os.MkdirAll(r.Target, 0o755); err != nil {
		return fmt.Errorf("cannot make the directory for its requirements: %w", cleanErr(err))
	}
	ctx, cancel := context.WithTimeout(context.Background(), cmpDur(r.Timeout, 10*time.Minute))
	defer cancel()
	cmd := exec.CommandContext(ctx, r.Python, "-m", "pip", "install", "--disable-pip-version-check", "--no-input",
		"--quiet", "--target", r.Target, "--requirement", r.File)
	cmd.Dir = filepath.Dir(r.File)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		return fmt.Errorf("pip install of %s did not finish within %v", filepath.Base(r.File), cmpDur(r.Timeout, 10*time.Minute))
	}
	if err != nil {
		return fmt.Errorf("pip install -r %s failed: %s", filepath.Base(r.File), pipError(out))
	}
	return nil
}

// pipError is pip's last error line, else its last line.
func pipError(out []byte) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if l := strings.TrimSpace(lines[i]); strings.HasPrefix(l, "ERROR:") {
			return l
		}
	}
	return lastLine(out)
}

// PythonPath is the PYTHONPATH entry its processes get: the model's directory first, as
// TorchServe's frontend sets it, then the installed requirements.
func PythonPath(modelDir, deps string) string {
	return "PYTHONPATH=" + joinPath(joinPath(modelDir, deps), os.Getenv("PYTHONPATH"))
}
