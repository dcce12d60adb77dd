package daemon

import (
	"errors"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/core"
)

// Each source of a model's settings refuses what archive.SettingLimits refuses: a
// registration's query (a bad parameter, 400), TorchServe's gRPC registration, the server's
// flags, and the snapshot. A model-config's are in package archive (TestSettingLimitsInConfigFiles).
func TestSettingLimitsBySource(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	params := map[string]string{"batch_size": "batch_size", "max_batch_delay": "max_batch_delay",
		"latency_target_ms": "latency_target_ms", "threads": "threads", "response_timeout": "response_timeout"}
	for param, key := range params {
		l := archive.SettingLimits[key]
		for _, n := range []int64{l.Min - 1, l.Max + 1} {
			var q fasthttp.Args
			q.Parse(param + "=" + strconv.FormatInt(n, 10))
			var s archive.Settings
			err := args{query: &q, log: quiet}.settings(&s)
			if !errors.Is(err, core.ErrBadInput) || !strings.Contains(err.Error(), param) {
				t.Errorf("registration %s=%d: %v, want a bad parameter naming it", param, n, err)
			}
			if n < 0 || n > 1<<31-1 {
				continue // int32: gRPC cannot carry it
			}
			err = registrationSettings(grpcParams{param: int32(n)}, quiet, &s)
			if n != 0 && (!errors.Is(err, core.ErrBadInput) || !strings.Contains(err.Error(), param)) {
				t.Errorf("gRPC %s=%d: %v, want a bad parameter naming it", param, n, err)
			}
		}
	}
	// gRPC's 0 is unset, as TorchServe's.
	var s archive.Settings
	if err := registrationSettings(grpcParams{"batch_size": 0, "threads": 0}, quiet, &s); err != nil || s.BatchSize.Given() || s.Threads.Set {
		t.Errorf("gRPC zeros: %v, %+v", err, s)
	}

	// The server's flags: the same minimums; 0 is the default of threads, max_workers and
	// latency_target_ms, and leaves them to the archive.
	for _, bad := range [][]string{{"--threads", "-1"}, {"--batch-size", "0"}, {"--job-queue-size", "0"},
		{"--response-timeout", "500ms"}, {"--workers", "-1"}, {"--max-batch-delay", "-1"}} {
		if _, err := LoadConfig(bad, envOf(nil)); err == nil {
			t.Errorf("%v: accepted", bad)
		}
	}
	c, err := LoadConfig([]string{"--threads", "0", "--max-workers", "0", "--latency-target-ms", "0"}, envOf(nil))
	if err != nil || c.Model.Threads.Set || c.Model.MaxWorkers.Set || c.Model.LatencyTarget.Set {
		t.Errorf("zeros: %v, %+v", err, c.Model)
	}

	// A snapshot entry outside the limits fails to restore, naming the setting.
	for _, m := range []snapshotModel{{BatchSize: 1, Threads: -2}, {BatchSize: 1, ResponseTimeout: 0.25}, {BatchSize: 1, Workers: -1}} {
		if _, err := m.settings(); err == nil {
			t.Errorf("snapshot %+v: accepted", m)
		}
	}
	m := snapshotModel{BatchSize: 4, MaxBatchDelayMS: 2.5, Workers: 2, AutoBatch: true, Threads: 3}
	got, err := m.settings()
	if err != nil || !got.BatchSize.Auto || got.MaxBatchDelay.V.Microseconds() != 2500 || got.MinWorkers.V != 2 || got.Threads.V != 3 || got.MaxWorkers.Set {
		t.Errorf("snapshot %+v: %+v, %v", m, got, err)
	}
}
