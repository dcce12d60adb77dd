package torch_test

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/torchd/torchd/torch"
)

// rusageThread is Linux's RUSAGE_THREAD: the calling thread's counts only.
const rusageThread = 1

// forwardFaults loads resnet18 and returns the page faults of the calling thread per forward
// of a batch of 4 (its activations are blocks of MiBs), after warm-up forwards. The forward
// runs on one intra-op thread, the calling one, so the count is that of its allocations
// alone: the same sequence of forwards faults the same pages whatever else the machine runs,
// where the whole process's count also holds the Go runtime's faults, which grow with time.
func forwardFaults(t *testing.T) float64 {
	const batch = 4
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	torch.SetNumThreads(1)
	m, err := torch.Load(zoo(t, "resnet18", "model.pt"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	data := make([]float32, batch*3*224*224)
	run := func(n int) {
		for range n {
			x, err := torch.NewTensor(data, batch, 3, 224, 224)
			if err != nil {
				t.Fatal(err)
			}
			out, err := m.Forward(x)
			if err != nil {
				t.Fatal(err)
			}
			torch.CloseValue(out)
			x.Close()
		}
	}
	run(5) // the profiling executor's runs and the heaps' growth
	var before, after syscall.Rusage
	if err := syscall.Getrusage(rusageThread, &before); err != nil {
		t.Fatal(err)
	}
	const n = 10
	run(n)
	if err := syscall.Getrusage(rusageThread, &after); err != nil {
		t.Fatal(err)
	}
	return float64(after.Minflt-before.Minflt) / n
}

// TestKeepFreedMemory runs resnet18's forwards in two child processes, one with glibc's
// defaults and one after KeepFreedMemory (it is process-wide and one-way, so neither can
// share this process), and compares the forwarding thread's page faults per forward. With
// the defaults each forward faults its activations in afresh; kept, the heaps hold them and
// a forward reuses the last one's pages. The comparison is of two counts of the same work,
// neither of which depends on the machine's load.
func TestKeepFreedMemory(t *testing.T) {
	if mode := os.Getenv("TORCHD_TEST_FAULTS"); mode != "" {
		if mode == "keep" && !torch.KeepFreedMemory() {
			t.Skip("not glibc")
		}
		fmt.Printf("faults/forward %.1f\n", forwardFaults(t))
		return
	}
	if testing.Short() {
		t.Skip("two child processes with resnet18")
	}
	child := func(mode string) float64 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestKeepFreedMemory$", "-test.v")
		cmd.Env = append(os.Environ(), "TORCHD_TEST_FAULTS="+mode)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", mode, err, out)
		}
		if strings.Contains(string(out), "not glibc") {
			t.Skip("not glibc: KeepFreedMemory does nothing")
		}
		for _, line := range strings.Split(string(out), "\n") {
			if v, ok := strings.CutPrefix(line, "faults/forward "); ok {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					t.Fatal(err)
				}
				return f
			}
		}
		t.Fatalf("%s: no figure in\n%s", mode, out)
		return 0
	}
	def, kept := child("default"), child("keep")
	t.Logf("page faults per forward of resnet18 at batch 4: %.0f with glibc's defaults, %.0f kept", def, kept)
	// A batch of 4 has more than 20 MiB of activations: 5,000 pages. Where glibc's
	// defaults already reuse them, there is nothing to compare.
	if def < 1000 {
		t.Skipf("glibc's defaults fault little here (%.0f per forward): nothing to compare", def)
	}
	if kept > def/10 {
		t.Errorf("%.0f page faults per forward with the freed memory kept, %.0f with glibc's defaults: freed memory is not kept", kept, def)
	}
}
