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

	"github.com/torchd/torchd/internal/memtrim"
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

// TestTrimArenas runs resnet18's forwards on four threads at once, which then exit, in a child
// process that keeps freed memory, and reads its resident set after malloc_trim and again
// after TrimArenas. malloc_trim never trims the top of a thread's arena, where a forward's
// activations go back when freed (more than 20 MiB at batch 4), so each thread left one
// behind; TrimArenas must give at least one such forward's worth back. Both figures are of
// memory, not time.
func TestTrimArenas(t *testing.T) {
	if os.Getenv("TORCHD_TEST_ARENAS") != "" {
		if !torch.KeepFreedMemory() {
			t.Skip("not glibc")
		}
		m, err := torch.Load(zoo(t, "resnet18", "model.pt"))
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		data := make([]float32, 4*3*224*224)
		done := make(chan error)
		for range 4 {
			go func() {
				runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
				torch.SetNumThreadsHere(1)
				for range 3 {
					x, err := torch.NewTensor(data, 4, 3, 224, 224)
					if err != nil {
						done <- err
						return
					}
					out, err := m.Forward(x)
					x.Close()
					if err != nil {
						done <- err
						return
					}
					torch.CloseValue(out)
				}
				done <- nil
			}()
		}
		for range 4 {
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
		memtrim.Trim()
		fmt.Printf("after malloc_trim %d\n", vmRSS(t))
		torch.TrimArenas()
		memtrim.TrimC()
		fmt.Printf("after TrimArenas %d\n", vmRSS(t))
		return
	}
	if testing.Short() {
		t.Skip("a child process with resnet18")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestTrimArenas$", "-test.v")
	cmd.Env = append(os.Environ(), "TORCHD_TEST_ARENAS=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if strings.Contains(string(out), "not glibc") {
		t.Skip("not glibc: KeepFreedMemory does nothing")
	}
	var trimmed, arenas int64 = -1, -1
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(line, "after malloc_trim "); ok {
			trimmed, _ = strconv.ParseInt(v, 10, 64)
		}
		if v, ok := strings.CutPrefix(line, "after TrimArenas "); ok {
			arenas, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	if trimmed < 0 || arenas < 0 {
		t.Fatalf("no figures in\n%s", out)
	}
	t.Logf("resident after four threads' forwards: %d MiB after malloc_trim, %d MiB after TrimArenas", trimmed>>20, arenas>>20)
	if trimmed-arenas < 16<<20 {
		t.Errorf("TrimArenas gave back %d MiB, want at least 16 MiB: the tops of the threads' arenas stay", (trimmed-arenas)>>20)
	}
}

// vmRSS returns this process's resident set in bytes.
func vmRSS(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc/self/status")
	return 0
}
