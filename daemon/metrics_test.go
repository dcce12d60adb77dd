package daemon_test

import (
	"strings"
	"testing"
)

// A command prints only its own output: the metrics library once logged "failed init: open
// /sys/fs/cgroup/cpu.pressure" on every start where cgroup v2 has no PSI files (a container
// without them, a cgroup v1 host), as this test machine may be.
func TestCommandsPrintNoPSINoise(t *testing.T) {
	out, err := runTorchd(t, "version")
	if err != nil {
		t.Fatalf("torchd version: %v\n%s", err, out)
	}
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 1 || !strings.HasPrefix(lines[0], "torchd ") {
		t.Errorf("torchd version printed more than its line: %q", out)
	}
	if strings.Contains(out, "pressure") || strings.Contains(out, "failed init") {
		t.Errorf("torchd version: %q", out)
	}
}
