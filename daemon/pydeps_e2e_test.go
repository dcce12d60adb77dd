package daemon_test

import (
	"strings"
	"testing"
)

// The requirements of an archive (install_py_dep_per_model) are handlerproc/served's
// TestRequirementsPerModel.

// A handler name torchd does not know (daemon/url.go runs it in a handler process) is
// accepted at registration with 0 workers, as TorchServe accepts it, and fails when workers are added, naming the handler and Python's
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
