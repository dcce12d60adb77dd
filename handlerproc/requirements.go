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
	root := filepath.Dir(r.File)
	if filepath.Base(r.Target) == depsDir {
		root = filepath.Dir(r.Target) // the archive's directory (DepsDir)
	}
	if err := checkIncludes(r.File, root, 0); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), cmpDur(r.Timeout, 10*time.Minute))
	defer cancel()
	cmd := exec.CommandContext(ctx, r.Python, "-m", "pip", "install", "--disable-pip-version-check", "--no-input",
		"--quiet", "--target", r.Target, "--requirement", r.File)
	cmd.Dir = filepath.Dir(r.File)
	out, err := runTracked(cmd)
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

// includeFlags are pip's requirement-file options that read another file: pip's error on a
// line it cannot parse quotes that line, so a file outside the archive (-r /etc/passwd)
// would reach the client in the error.
var includeFlags = []string{"-r", "--requirement", "-c", "--constraint"}

// checkIncludes refuses a requirements file that includes a file outside root (the archive's
// directory), directly or through the files it includes. The error names the option, never
// what the file holds.
func checkIncludes(file, root string, depth int) error {
	if depth > 8 {
		return fmt.Errorf("%s: requirement files include each other more than 8 deep", filepath.Base(file))
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("cannot read the requirements file %s", filepath.Base(file))
	}
	for i, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		var target string
		for _, flag := range includeFlags {
			switch {
			case f[0] == flag && len(f) > 1:
				target = f[1]
			case strings.HasPrefix(f[0], flag+"="):
				target = f[0][len(flag)+1:]
			case len(flag) == 2 && strings.HasPrefix(f[0], flag) && len(f[0]) > 2:
				target = f[0][2:]
			}
		}
		if target == "" {
			continue
		}
		if strings.Contains(target, "://") {
			return fmt.Errorf("%s line %d: a requirement file may include only files of the archive, not a URL", filepath.Base(file), i+1)
		}
		path := target
		if !filepath.IsAbs(path) {
			path = filepath.Join(filepath.Dir(file), path)
		}
		if !inside(path, root) {
			return fmt.Errorf("%s line %d: a requirement file may include only files of the archive", filepath.Base(file), i+1)
		}
		if err := checkIncludes(path, root, depth+1); err != nil {
			return err
		}
	}
	return nil
}

// inside reports whether path, its symbolic links resolved, is within root.
func inside(path, root string) bool {
	p, err1 := filepath.EvalSymlinks(path)
	r, err2 := filepath.EvalSymlinks(root)
	if err1 != nil || err2 != nil {
		return false
	}
	rel, err := filepath.Rel(r, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}
