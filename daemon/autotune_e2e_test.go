package daemon_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TORCHD_LOG_LEVEL is read by the daemon's configuration; what automatic batching does is
// backends/libtorch's TestAutoBatching and TestAutoBatchingLoadShift, and tuner's tests.

// TORCHD_LOG_LEVEL: debug shows the tuner's windows; a level that is not one refuses to
// start with a message that names the variable.
func TestLogLevel(t *testing.T) {
	t.Setenv("TORCHD_LOG_LEVEL", "loud")
	if out, err := runTorchd(t, "serve", "--inference-address", "127.0.0.1:0", "--management-address", "127.0.0.1:0",
		"--metrics-address", "127.0.0.1:0"); err == nil || !strings.Contains(out, "TORCHD_LOG_LEVEL") {
		t.Fatalf("bad level: %v\n%s", err, out)
	}
	t.Setenv("TORCHD_LOG_LEVEL", "debug")
	s := startServer(t, "--access-log=false")
	s.register(t, "url=digits_tensor.mar&initial_workers=1&batch_size=auto")
	body, _ := os.ReadFile(filepath.Join(zooDir, "digits", "sample_tensor.npy"))
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(s.Log(), `msg="auto batching window" model=digits_tensor`) {
		if time.Now().After(deadline) {
			t.Fatalf("no debug window line:\n%s", s.Log())
		}
		forEach(64, 8, func(int) { do(t, "POST", s.inf+"/predictions/digits_tensor", "application/x-npy", body) })
	}
}
