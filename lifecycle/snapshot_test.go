package lifecycle

import "testing"

// TestSnapshotSettingLimits: a snapshot entry outside archive.SettingLimits fails to
// restore, naming the setting; one inside comes back as it was saved, automatic settings
// automatic again.
func TestSnapshotSettingLimits(t *testing.T) {
	for _, m := range []SnapshotModel{{BatchSize: 1, Threads: -2}, {BatchSize: 1, ResponseTimeout: 0.25}, {BatchSize: 1, Workers: -1}} {
		if _, err := m.settings(); err == nil {
			t.Errorf("snapshot %+v: accepted", m)
		}
	}
	m := SnapshotModel{BatchSize: 4, MaxBatchDelayMS: 2.5, Workers: 2, AutoBatch: true, Threads: 3}
	got, err := m.settings()
	if err != nil || !got.BatchSize.Auto || got.MaxBatchDelay.V.Microseconds() != 2500 || got.MinWorkers.V != 2 || got.Threads.V != 3 || got.MaxWorkers.Set {
		t.Errorf("snapshot %+v: %+v, %v", m, got, err)
	}
}
