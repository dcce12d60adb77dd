package daemon_test

import (
	"archive/zip"
	"cmp"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// writeProbeWheel writes a pure-Python wheel of one module, tdprobe, into dir: a requirement
// that pip installs without an index.
func writeProbeWheel(t *testing.T, dir string) string {
	t.Helper()
	name := "tdprobe-1.0-py3-none-any.whl"
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	z := zip.NewWriter(f)
	for path, body := range map[string]string{
		"tdprobe/__init__.py":            "VALUE = 'probe-ok'\n",
		"tdprobe-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: tdprobe\nVersion: 1.0\n",
		"tdprobe-1.0.dist-info/WHEEL":    "Wheel-Version: 1.0\nGenerator: torchd-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
		"tdprobe-1.0.dist-info/RECORD":   "tdprobe/__init__.py,,\ntdprobe-1.0.dist-info/METADATA,,\ntdprobe-1.0.dist-info/WHEEL,,\ntdprobe-1.0.dist-info/RECORD,,\n",
	} {
		w, err := z.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(body))
	}
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	return name
}

// archiveWithRequirements packs, with torch-model-archiver, a handler that imports tdprobe and
// a requirements.txt that names tdprobe's wheel, shipped in the archive, into dir as NAME.mar;
// requirements.txt may name another line in place of the wheel.
func archiveWithRequirements(t *testing.T, py, dir, name, requirement string) {
	t.Helper()
	src := t.TempDir()
	wheel := writeProbeWheel(t, src)
	files := map[string]string{
		"req_handler.py":   "import tdprobe\n\n\ndef handle(data, context):\n    if data is None:\n        return None\n    return [{'probe': tdprobe.VALUE}] * len(data)\n",
		"requirements.txt": cmp.Or(requirement, "./"+wheel) + "\n",
		"weights.bin":      "unused",
	}
	for n, b := range files {
		if err := os.WriteFile(filepath.Join(src, n), []byte(b), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(filepath.Join(filepath.Dir(py), "torch-model-archiver"), "--model-name", name, "--version", "1.0",
		"--serialized-file", "weights.bin", "--handler", "req_handler.py", "--requirements-file", "requirements.txt",
		"--extra-files", wheel, "--export-path", dir, "--force")
	cmd.Dir = src
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("torch-model-archiver: %v\n%s", err, out)
	}
}

// An archive's requirements.txt is installed for its handler processes only when
// install_py_dep_per_model allows it (here from KServe's layout, config.properties); without
// it, the file is not installed, the log says so, and the failed start says why.
func TestRequirementsPerModel(t *testing.T) {
	py := venvPython(t)
	props := strings.Replace(strings.Replace(kserveV2Properties, "install_py_dep_per_model=false", "install_py_dep_per_model=true", 1),
		`"mnist":{"1.0":{"defaultVersion":true,"marName":"mnist.mar"`, `"pyreq":{"1.0":{"defaultVersion":true,"marName":"pyreq.mar"`, 1)
	root := torchServeTree(t, props, nil)
	archiveWithRequirements(t, py, filepath.Join(root, "model-store"), "pyreq", "")
	archiveWithRequirements(t, py, filepath.Join(root, "model-store"), "pybadreq", "./missing-1.0-py3-none-any.whl")
	s := startServer(t, "--python", py, "--ts-config", filepath.Join(root, "config", "config.properties"), "--model-store", filepath.Join(root, "model-store"))
	s.waitHealthy(t)
	if r := post(s.inf+"/predictions/pyreq", "application/json", []byte(`{"x":1}`)); r.status != 200 || !strings.Contains(string(r.body), "probe-ok") {
		t.Fatalf("a handler importing its installed requirement: %d %s", r.status, r.body)
	}
	if r := post(s.inf+"/v1/models/pyreq:predict", "application/json", []byte(`{"instances":[1]}`)); r.status != 200 || !strings.Contains(string(r.body), "probe-ok") {
		t.Fatalf("KServe v1: %d %s", r.status, r.body)
	}
	if !strings.Contains(s.Log(), "installed the archive's requirements") {
		t.Errorf("the install is not logged:\n%s", s.Log())
	}
	// A requirement pip cannot install fails the registration with pip's error.
	errorShape(t, do(t, "POST", s.mgmt+"/models?url=pybadreq.mar&initial_workers=1&synchronous=true", "", nil),
		500, "InternalServerException", "pip install -r requirements.txt failed: ERROR:")

	// torchd's default: not installed.
	off := startServer(t, "--python", py, "--model-store", filepath.Join(root, "model-store"))
	r := do(t, "POST", off.mgmt+"/models?url=pyreq.mar&initial_workers=1&synchronous=true", "", nil)
	if r.status != 500 || !strings.Contains(string(r.body), "ModuleNotFoundError") || !strings.Contains(string(r.body), "requirements.txt was not installed: install_py_dep_per_model is off") {
		t.Errorf("without install_py_dep_per_model: %d %s", r.status, r.body)
	}
	if !strings.Contains(off.Log(), "requirements file is not installed") {
		t.Errorf("the refusal is not logged:\n%s", off.Log())
	}
}

// A handler name torchd does not know is accepted at registration with 0 workers, as
// TorchServe accepts it, and fails when workers are added, naming the handler and Python's
// error; the model stays registered with none. With workers at registration it fails there.
func TestUnknownHandlerZeroWorkers(t *testing.T) {
	s := startServer(t, "--python", venvPython(t))
	r := do(t, "POST", s.mgmt+"/models?url=digits.mar&handler=nope&initial_workers=0&synchronous=true", "", nil)
	if r.status != 200 || !strings.Contains(string(r.body), "registered with 0 initial workers") {
		t.Fatalf("registration with 0 workers: %d %s", r.status, r.body)
	}
	errorShape(t, do(t, "PUT", s.mgmt+"/models/digits?min_worker=1&synchronous=true", "", nil),
		500, "InternalServerException", `handler "nope"`)
	r = do(t, "PUT", s.mgmt+"/models/digits?min_worker=1&synchronous=true", "", nil)
	if !strings.Contains(string(r.body), "No module named") {
		t.Errorf("the scale-up's error lacks Python's: %s", r.body)
	}
	if got := s.workers(t, "digits"); len(got) != 0 {
		t.Errorf("workers after the failed scale-up: %v", got)
	}
	if r := do(t, "DELETE", s.mgmt+"/models/digits", "", nil); r.status != 200 {
		t.Errorf("unregister: %d %s", r.status, r.body)
	}
	errorShape(t, do(t, "POST", s.mgmt+"/models?url=digits.mar&handler=nope&initial_workers=1&synchronous=true", "", nil),
		500, "InternalServerException", `handler "nope" given at registration does not exist`)
}
