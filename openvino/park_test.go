package openvino_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/torchd/torchd/internal/offload"
	"github.com/torchd/torchd/openvino"
)

// A long inference runs on the request's own thread while Infer waits parked: the answers
// are Python's, a cancel reaches it, and Close ends the thread.
func TestParkedInference(t *testing.T) {
	t.Cleanup(offload.SetAfter(0)) // every inference is long enough
	in, _ := readNpy(t, zoo(t, "ref_input.npy"))
	_, want := readNpy(t, zoo(t, "ref_output_int8.npy"))
	m := compile(t, "resnet18_ov_int8", openvino.Options{Threads: 2, DynamicBatch: true})
	r, err := m.NewRequest()
	if err != nil {
		t.Fatal(err)
	}
	before := offload.Waits()
	for range 2 {
		out, err := r.Infer([]openvino.Value{in})
		if err != nil {
			t.Fatal(err)
		}
		got := floats(out[0].Data)
		if diff, scale := maxDiff(got, want); diff > 1e-3*max(scale, 1) {
			t.Errorf("parked: differs from Python's by %g (logits up to %g)", diff, scale)
		}
		checkLabels(t, "resnet18_ov_int8", got, want)
	}
	if n := offload.Waits() - before; n != 2 {
		t.Errorf("%d inferences waited parked, want 2", n)
	}
	if n := forwardThreads(t); n < 1 {
		t.Errorf("no thread named torchd-forward in /proc/self/task")
	}
	ctx, cancel := context.WithCancel(context.Background())
	go cancel()
	if _, err := r.InferContext(ctx, []openvino.Value{in}); err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled while parked: %v", err)
	}
	if _, err := r.Infer([]openvino.Value{in}); err != nil {
		t.Errorf("after a cancel: %v", err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Infer([]openvino.Value{in}); !errors.Is(err, openvino.ErrClosed) {
		t.Errorf("after Close: %v, want ErrClosed", err)
	}
}

// forwardThreads counts the process's threads named as offload.h names its own, so that
// top -H and perf show them apart from the Go runtime's.
func forwardThreads(t *testing.T) int {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Skip("no /proc/self/task")
	}
	n := 0
	for _, e := range tasks {
		b, err := os.ReadFile(filepath.Join("/proc/self/task", e.Name(), "comm"))
		if err == nil && strings.TrimSpace(string(b)) == "torchd-forward" {
			n++
		}
	}
	return n
}
