package torchserve

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

// A registration refuses what archive.SettingLimits refuses, over REST (a bad parameter, 400)
// and TorchServe's gRPC registration; the server's flags and the snapshot are daemon's
// (TestSettingLimitsBySource).
func TestRegistrationSettingLimits(t *testing.T) {
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
}
