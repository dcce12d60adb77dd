package torchserve_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/torchd/torchd/core/coretest"
	"github.com/torchd/torchd/lifecycle"
)

type snapModel struct {
	Name            string  `json:"name"`
	Version         string  `json:"version"`
	Default         bool    `json:"default"`
	BatchSize       int     `json:"batch_size"`
	MaxBatchDelayMS float64 `json:"max_batch_delay_ms"`
	Workers         int     `json:"workers"`
	Threads         int     `json:"threads"`
	ForwardBatch    string  `json:"forward_batch"`
}

func readSnapshot(t *testing.T, path string) []snapModel {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f struct{ Models []snapModel }
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatalf("snapshot: %v\n%s", err, b)
	}
	return f.Models
}

type described struct {
	ModelVersion  string `json:"modelVersion"`
	MinWorkers    int    `json:"minWorkers"`
	BatchSize     int    `json:"batchSize"`
	MaxBatchDelay int64  `json:"maxBatchDelay"`
	ForwardBatch  int    `json:"forwardBatch"`
	Batching      struct {
		Threads int `json:"threadsPerWorker"`
	} `json:"batching"`
}

// stop ends s as the daemon's stop does: the service, then the models.
func (s *served) stop() {
	s.life.Stop()
	s.reg.Close()
}

func (s *served) waitHealthy(t *testing.T) {
	t.Helper()
	coretest.WaitFor(t, "healthy", s.life.Ready)
}

// Models registered through the API come back after a restart, with their versions, default
// version, batching, worker and thread counts; start-up models and unregistered ones are not
// recorded; no snapshot file (enable_snapshots = false) restores nothing, and a corrupt one
// is reported and skipped.
func TestSnapshotRestore(t *testing.T) {
	store := writeStore(t, digitsV1, digitsV2, digitsTensorArchive, slowModel)
	snap := filepath.Join(t.TempDir(), "state", "snapshot.json")
	opts := options{store: store, snapshot: snap, startup: lifecycle.Startup{Models: "digits_tensor=digits_tensor.mar"}}
	s := serve(t, 1, nil, opts)
	s.waitHealthy(t)
	s.register(t, "url=digits.mar&batch_size=4&max_batch_delay=7&initial_workers=1&threads=1&forward_batch=2")
	s.register(t, "url=v2/digits.mar&initial_workers=1&forward_batch=auto")
	s.register(t, "url=slow.mar&initial_workers=1")
	expectStatus(t, s.mgmt("PUT", "/models/digits/2.0/set-default", "", nil), 200, `Default version successfully updated for model "digits" to "2.0"`)
	expectStatus(t, s.mgmt("PUT", "/models/digits/1.0?min_worker=2&synchronous=true", "", nil), 200, "Workers scaled to 2 for model: digits, version: 1.0")
	expectStatus(t, s.mgmt("DELETE", "/models/slow", "", nil), 200, `Model "slow" unregistered`)

	got := readSnapshot(t, snap)
	if len(got) != 2 || got[0].Version != "1.0" || got[1].Version != "2.0" || got[0].Default || !got[1].Default ||
		got[0].BatchSize != 4 || got[0].MaxBatchDelayMS != 7 || got[0].Workers != 2 || got[0].Threads != 1 || got[1].Threads != 0 ||
		got[0].ForwardBatch != "2" || got[1].ForwardBatch != "auto" {
		t.Fatalf("snapshot: %+v", got)
	}
	s.stop()

	s2 := serve(t, 1, nil, opts)
	s2.waitHealthy(t)
	var all []described
	s2.mgmt("GET", "/models/digits/all", "", nil).json(t, &all)
	if len(all) != 2 || all[0].ModelVersion != "1.0" || all[0].BatchSize != 4 || all[0].MaxBatchDelay != 7 || all[0].MinWorkers != 2 ||
		all[0].Batching.Threads != 1 || all[0].ForwardBatch != 2 || all[1].ForwardBatch < 1 {
		t.Fatalf("restored digits: %+v", all)
	}
	var def []described
	s2.mgmt("GET", "/models/digits", "", nil).json(t, &def)
	if def[0].ModelVersion != "2.0" {
		t.Fatalf("restored default version %s, want 2.0", def[0].ModelVersion)
	}
	png, _ := heldOut(t)
	if r := s2.inf("POST", "/predictions/digits/1.0", "image/png", png[0]); r.status != 200 {
		t.Fatalf("restored model: %d %s", r.status, r.body)
	}
	if r := s2.mgmt("GET", "/models/slow", "", nil); r.status != 404 {
		t.Fatalf("an unregistered model came back: %d", r.status)
	}
	s2.stop()
	// The restore rewrote nothing: the same two versions.
	if got := readSnapshot(t, snap); len(got) != 2 {
		t.Fatalf("snapshot after the restart: %+v", got)
	}

	// A start that names a snapshot model in the models setting too: one copy, and healthy.
	s2b := serve(t, 1, nil, options{store: store, snapshot: snap, startup: lifecycle.Startup{Models: "digits=digits.mar,digits_tensor=digits_tensor.mar"}})
	s2b.waitHealthy(t)
	if l := s2b.log.String(); !strings.Contains(l, "start-up model already loaded from the snapshot") && !strings.Contains(l, "model from the snapshot already loaded by the models setting") {
		t.Fatalf("the overlap of the models setting and the snapshot was not reported:\n%s", l)
	}
	s2b.stop()

	s3 := serve(t, 1, nil, options{store: store, startup: opts.startup})
	s3.waitHealthy(t)
	if r := s3.mgmt("GET", "/models/digits", "", nil); r.status != 404 {
		t.Fatalf("no snapshot file restored digits: %d", r.status)
	}
	s3.stop()

	os.WriteFile(snap, []byte("{not json"), 0o644)
	s4 := serve(t, 1, nil, opts)
	s4.waitHealthy(t)
	if !strings.Contains(s4.log.String(), "snapshot not read") {
		t.Fatalf("a corrupt snapshot was not reported:\n%s", s4.log.String())
	}
}

// Models named at start-up load and /ping turns healthy only once they are warm; they are
// described as loaded at start-up. A start-up model that fails keeps /ping unhealthy.
func TestStartupModels(t *testing.T) {
	store := writeStore(t, digitsV1, slowModel)
	s := serve(t, 1, nil, options{store: store, startup: lifecycle.Startup{Models: "digits=digits.mar,slow=slow.mar"}})
	s.waitHealthy(t)
	var list struct{ Models []struct{ ModelName string } }
	s.mgmt("GET", "/models", "", nil).json(t, &list)
	if len(list.Models) != 2 {
		t.Fatalf("start-up models: %+v", list)
	}
	var desc []struct {
		LoadedAtStartup bool `json:"loadedAtStartup"`
	}
	s.mgmt("GET", "/models/digits", "", nil).json(t, &desc)
	if !desc[0].LoadedAtStartup {
		t.Fatal("loadedAtStartup false for a start-up model")
	}
	s2 := serve(t, 1, nil, options{store: store, startup: lifecycle.Startup{Models: "absent.mar"}})
	s2.life.WaitStartup()
	var ping struct{ Status string }
	r := s2.inf("GET", "/ping", "", nil)
	r.json(t, &ping)
	if r.status != 500 || ping.Status != "Unhealthy" {
		t.Fatalf("ping after a start-up model failed: %d %s", r.status, r.body)
	}
}
