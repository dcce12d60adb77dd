package daemon

import (
	"testing"
)

// Each source of a model's settings refuses what archive.SettingLimits refuses: the server's
// flags. The snapshot's are in package lifecycle (TestSnapshotSettingLimits), a
// registration's in package torchserve
// (TestRegistrationSettingLimits), a model-config's in package archive
// (TestSettingLimitsInConfigFiles).
func TestSettingLimitsBySource(t *testing.T) {
	// The server's flags: the same minimums; 0 is the default of threads, max_workers and
	// latency_target_ms, and leaves them to the archive.
	for _, bad := range [][]string{{"--threads", "-1"}, {"--batch-size", "0"}, {"--job-queue-size", "0"},
		{"--response-timeout", "500ms"}, {"--workers", "-1"}, {"--max-batch-delay", "-1"}} {
		if _, err := LoadConfig(bad, envOf(nil)); err == nil {
			t.Errorf("%v: accepted", bad)
		}
	}
	c, err := LoadConfig([]string{"--threads", "0", "--max-workers", "0", "--latency-target-ms", "0"},
		envOf(map[string]string{"TORCHD_THREADS": "4"}))
	if err != nil || c.Model.Threads.Set || c.Model.MaxWorkers.Set || c.Model.LatencyTarget.Set {
		t.Errorf("zeros, the flag's over the environment's threads: %v, %+v", err, c.Model)
	}
}
