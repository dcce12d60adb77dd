package libtorch_test

import (
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/lifecycle"
)

// A registration that fails to restore (here: a file:// URL, after a restart that no longer
// admits it, as a server without the allowed_urls that admitted it) stays in the snapshot
// and in GET /models as FAILED, across later registrations, loads again once it can, and
// goes only when unregistered.
func TestSnapshotKeepsFailedRestore(t *testing.T) {
	root := t.TempDir()
	mar, err := os.ReadFile(filepath.Join(buildStore(t), "digits.mar"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "digits.mar"), mar, 0o644); err != nil {
		t.Fatal(err)
	}
	snap := filepath.Join(t.TempDir(), "snapshot.json")
	type entry struct{ ModelName, Status, Error string }
	list := func(s *server) map[string]entry {
		var l struct{ Models []entry }
		s.manage("GET", "/models").json(t, &l)
		out := map[string]entry{}
		for _, e := range l.Models {
			out[e.ModelName] = e
		}
		return out
	}
	snapshot := func() map[string]string {
		b, err := os.ReadFile(snap)
		if err != nil {
			t.Fatal(err)
		}
		var f struct {
			Models []struct{ Name, Failed string }
		}
		if err := json.Unmarshal(b, &f); err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, m := range f.Models {
			out[m.Name] = m.Failed
		}
		return out
	}
	// restart stops prev and starts a server over the same snapshot, which admits file://
	// URLs when allow is true.
	restart := func(prev *server, allow bool) *server {
		if prev != nil {
			prev.life.Stop()
			prev.reg.Close()
		}
		s := newServerConfig(t, serverConfig{snapshot: snap, refuse: func(u string) error {
			if !allow && strings.HasPrefix(u, "file://") {
				return core.Errorf(core.ErrBadModel, "url %s is not allowed or not found", u)
			}
			return nil
		}})
		s.life.Start(lifecycle.Startup{})
		s.life.WaitStartup()
		return s
	}

	s := restart(nil, true)
	s.register(t, "url="+url.QueryEscape("file://"+root+"/digits.mar")+"&initial_workers=1&synchronous=true")

	s = restart(s, false)
	if e := list(s)["digits"]; e.Status != "FAILED" || !strings.Contains(e.Error, "not allowed or not found") {
		t.Fatalf("GET /models after a failed restore: %+v", list(s))
	}
	// Described as listed, not 404: GET /models/digits and its version and "all".
	for _, path := range []string{"/models/digits", "/models/digits/1.0", "/models/digits/all"} {
		var d []struct{ ModelName, ModelVersion, Status, Error string }
		r := s.manage("GET", path)
		r.json(t, &d)
		if r.status != 200 || len(d) != 1 || d[0].ModelName != "digits" || d[0].ModelVersion != "1.0" || d[0].Status != "FAILED" || !strings.Contains(d[0].Error, "not allowed or not found") {
			t.Fatalf("GET %s after a failed restore: %d %s", path, r.status, r.body)
		}
	}
	errorShape(t, s.manage("GET", "/models/digits/2.0"), 404, "", "")
	if !strings.Contains(s.Log(), "stays in the snapshot") || strings.Contains(s.Log(), `msg="model restored from the snapshot" model=digits`) {
		t.Errorf("the log does not tell the failure plainly:\n%s", s.Log())
	}
	s.register(t, "url=digits_tensor.mar&initial_workers=1&synchronous=true")
	if got := snapshot(); len(got) != 2 || got["digits"] == "" || got["digits_tensor"] != "" {
		t.Fatalf("snapshot after the next registration: %v, want digits kept as failed", got)
	}

	s = restart(s, true)
	if got := list(s); got["digits"].Status != "" || got["digits_tensor"].ModelName == "" {
		t.Fatalf("GET /models once the URL is allowed again: %+v", got)
	}
	if r := s.do("POST", "/predictions/digits", "image/png", heldOut(t)[0]); r.status != 200 {
		t.Fatalf("predict after the restore: %d %s", r.status, r.body)
	}

	s = restart(s, false)
	if list(s)["digits"].Status != "FAILED" {
		t.Fatalf("GET /models: %+v", list(s))
	}
	expectStatus(t, s.manage("DELETE", "/models/digits"), 200, `Model "digits" unregistered`)
	if got := snapshot(); len(got) != 1 || got["digits_tensor"] != "" {
		t.Fatalf("snapshot after unregistering the failed model: %v", got)
	}
	if _, ok := list(s)["digits"]; ok {
		t.Fatalf("GET /models still lists digits: %+v", list(s))
	}
	errorShape(t, s.manage("DELETE", "/models/digits"), 404, "ModelNotFoundException", "")
}
