package daemon_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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

// Models registered through the API come back after a restart, with their versions, default
// version, batching, worker and thread counts; start-up models and unregistered ones are not
// recorded; enable_snapshots = false ignores the snapshot, and a corrupt one is reported
// and skipped.
func TestSnapshotRestore(t *testing.T) {
	snap := filepath.Join(t.TempDir(), "state", "snapshot.json")
	args := []string{"--snapshot-file", snap, "--models", "digits_tensor=digits_tensor.mar"}
	s := startServer(t, args...)
	s.waitHealthy(t)
	s.register(t, "url=digits.mar&batch_size=4&max_batch_delay=7&initial_workers=1&threads=1&forward_batch=2")
	s.register(t, "url=v2/digits.mar&initial_workers=1&forward_batch=auto")
	s.register(t, "url=slow.mar&initial_workers=1")
	expectStatus(t, do(t, "PUT", s.mgmt+"/models/digits/2.0/set-default", "", nil), 200, `Default version successfully updated for model "digits" to "2.0"`)
	expectStatus(t, do(t, "PUT", s.mgmt+"/models/digits/1.0?min_worker=2&synchronous=true", "", nil), 200, "Workers scaled to 2 for model: digits, version: 1.0")
	expectStatus(t, do(t, "DELETE", s.mgmt+"/models/slow", "", nil), 200, `Model "slow" unregistered`)

	got := readSnapshot(t, snap)
	if len(got) != 2 || got[0].Version != "1.0" || got[1].Version != "2.0" || got[0].Default || !got[1].Default ||
		got[0].BatchSize != 4 || got[0].MaxBatchDelayMS != 7 || got[0].Workers != 2 || got[0].Threads != 1 || got[1].Threads != 0 ||
		got[0].ForwardBatch != "2" || got[1].ForwardBatch != "auto" {
		t.Fatalf("snapshot: %+v", got)
	}
	s.stop()

	start := time.Now()
	s2 := startServer(t, args...)
	s2.waitHealthy(t)
	t.Logf("restart to healthy with 3 model versions: %v", time.Since(start).Round(time.Millisecond))
	var all []described
	do(t, "GET", s2.mgmt+"/models/digits/all", "", nil).json(t, &all)
	if len(all) != 2 || all[0].ModelVersion != "1.0" || all[0].BatchSize != 4 || all[0].MaxBatchDelay != 7 || all[0].MinWorkers != 2 ||
		all[0].Batching.Threads != 1 || all[0].ForwardBatch != 2 || all[1].ForwardBatch < 1 {
		t.Fatalf("restored digits: %+v", all)
	}
	var def []described
	do(t, "GET", s2.mgmt+"/models/digits", "", nil).json(t, &def)
	if def[0].ModelVersion != "2.0" {
		t.Fatalf("restored default version %s, want 2.0", def[0].ModelVersion)
	}
	png, _ := heldOut(t)
	if r := do(t, "POST", s2.inf+"/predictions/digits/1.0", "image/png", png[0]); r.status != 200 {
		t.Fatalf("restored model: %d %s", r.status, r.body)
	}
	if r := do(t, "GET", s2.mgmt+"/models/slow", "", nil); r.status != 404 {
		t.Fatalf("an unregistered model came back: %d", r.status)
	}
	s2.stop()
	// The restore rewrote nothing: the same two versions.
	if got := readSnapshot(t, snap); len(got) != 2 {
		t.Fatalf("snapshot after the restart: %+v", got)
	}

	// A start that names a snapshot model in --models too: one copy, and healthy.
	s2b := startServer(t, "--snapshot-file", snap, "--models", "digits=digits.mar,digits_tensor=digits_tensor.mar")
	s2b.waitHealthy(t)
	if l := s2b.Log(); !strings.Contains(l, "start-up model already loaded from the snapshot") && !strings.Contains(l, "model from the snapshot already loaded by the models setting") {
		t.Fatalf("the overlap of --models and the snapshot was not reported:\n%s", s2b.Log())
	}
	s2b.stop()

	s3 := startServer(t, append(args, "--enable-snapshots=false")...)
	s3.waitHealthy(t)
	if r := do(t, "GET", s3.mgmt+"/models/digits", "", nil); r.status != 404 {
		t.Fatalf("enable_snapshots=false restored digits: %d", r.status)
	}
	s3.stop()

	os.WriteFile(snap, []byte("{not json"), 0o644)
	s4 := startServer(t, args...)
	s4.waitHealthy(t)
	if !strings.Contains(s4.Log(), "snapshot not read") {
		t.Fatalf("a corrupt snapshot was not reported:\n%s", s4.Log())
	}
}
