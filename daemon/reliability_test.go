package daemon_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

type describedWorker struct {
	ID     string `json:"id"`
	Status string `json:"status"`
}

func (s *server) workers(t *testing.T, model string) (statuses []string) {
	t.Helper()
	var desc []struct {
		Workers []describedWorker `json:"workers"`
	}
	do(t, "GET", s.mgmt+"/models/"+model, "", nil).json(t, &desc)
	for _, w := range desc[0].Workers {
		statuses = append(statuses, w.Status)
	}
	return statuses
}

// The whole process dies (SIGKILL, as the OOM killer sends): the next start removes the
// extracted archives the dead process left in TMPDIR, brings the API-registered model back
// from the snapshot, and reports healthy; the time from exec to healthy is logged.
func TestKilledProcessRestart(t *testing.T) {
	tmp := t.TempDir()
	snap := filepath.Join(t.TempDir(), "snapshot.json")
	s := startServerIn(t, tmp, "--snapshot-file", snap)
	s.register(t, "url=digits.mar&initial_workers=1")
	left := s.tmpEntries(t)
	if len(left) != 1 || !strings.HasPrefix(left[0], fmt.Sprintf("torchd-%d-model-", s.Cmd.Process.Pid)) {
		t.Fatalf("TMPDIR holds %v, want one extraction directory named with the pid", left)
	}
	s.Cmd.Process.Signal(syscall.SIGKILL)
	<-s.Exited
	if got := s.tmpEntries(t); len(got) != 1 {
		t.Fatalf("after SIGKILL TMPDIR holds %v", got)
	}

	start := time.Now()
	s2 := startServerIn(t, tmp, "--snapshot-file", snap)
	s2.waitHealthy(t)
	t.Logf("exec to healthy, digits restored from the snapshot: %v", time.Since(start).Round(time.Millisecond))
	now := s2.tmpEntries(t)
	if len(now) != 1 || !strings.HasPrefix(now[0], fmt.Sprintf("torchd-%d-model-", s2.Cmd.Process.Pid)) {
		t.Fatalf("TMPDIR after the restart holds %v, want only the new process's extraction", now)
	}
	if !strings.Contains(s2.Log(), "removed what killed torchd processes left in TMPDIR") {
		t.Error("the sweep was not logged")
	}
	png, _ := heldOut(t)
	if r := do(t, "POST", s2.inf+"/predictions/digits", "image/png", png[0]); r.status != 200 {
		t.Fatalf("after the restart: %d %s", r.status, r.body)
	}
}
