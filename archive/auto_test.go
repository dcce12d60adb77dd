package archive

import (
	"strings"
	"testing"
	"time"
)

// "auto" hands batch_size, max_batch_delay and min_workers to the daemon's self-tuning;
// latency_target_ms is its p99 objective. Any other string is still an error.
func TestParseAutoBatching(t *testing.T) {
	c, err := ParseModelConfig("model-config.toml", []byte("batch_size = \"auto\"\nmax_batch_delay = \"auto\"\nmin_workers = \"auto\"\nlatency_target_ms = 80\nforward_batch = \"auto\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.BatchSize != Auto[int]() || c.MaxBatchDelay != Auto[time.Duration]() || c.MinWorkers != Auto[int]() || c.LatencyTarget != Of(80*time.Millisecond) || c.ForwardBatch != Auto[int]() {
		t.Fatalf("%+v", c)
	}
	for _, bad := range []string{`batch_size = "big"`, `latency_target_ms = 0`, `max_batch_delay = "Auto"`} {
		if _, err := ParseModelConfig("model-config.toml", []byte(bad)); err == nil || !strings.Contains(err.Error(), strings.Fields(bad)[0]) {
			t.Errorf("%s: %v", bad, err)
		}
	}
}
