package daemon_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// minorFaults is a process's minor page faults so far (/proc/PID/stat, field 10).
func minorFaults(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:]) // after "pid (comm) "
	n, err := strconv.Atoi(f[7])
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// With keep_freed_memory (the default), forwards under load reuse their activations'
// memory: two registrations of resnet18 at batch 16, each loaded with ab, fault in at most
// a few hundred pages per image once warm. With glibc's defaults the same runs took
// 1,800–4,700 faults per image, and with mmap and trimming off but no top pad 1,100–3,300
// (bench/malloc-ab.sh). Each load is a fixed number of requests, not a fixed time, so that a
// busy machine changes how long it takes but not how many forwards the faults are shared by.
func TestForwardsReuseMemoryUnderLoad(t *testing.T) {
	ab := requireAB(t)
	if testing.Short() {
		t.Skip("resnet18 under load")
	}
	s := startServer(t)
	for _, n := range []string{"r1", "r2"} {
		s.register(t, "url=resnet18.mar&model_name="+n+"&batch_size=16&max_batch_delay=0&initial_workers=1&synchronous=true")
	}
	img := filepath.Join(zooDir, "resnet18", "sample_640x480.jpg")
	load := func(name string) int {
		out, err := exec.Command(ab, "-k", "-q", "-c", "32", "-n", "320", "-T", "image/jpeg", "-p", img,
			s.inf+"/predictions/"+name).CombinedOutput()
		if err != nil {
			t.Fatalf("ab: %v\n%s", err, out)
		}
		c := abComplete.FindSubmatch(out)
		failed, ok := abRealFailures(string(out))
		if c == nil || !ok || failed != 0 || strings.Contains(string(out), "Non-2xx") {
			t.Fatalf("requests failed:\n%s", out)
		}
		n, _ := strconv.Atoi(string(c[1]))
		return n
	}
	pid := s.cmd.Process.Pid
	for _, n := range []string{"r1", "r2"} {
		load(n) // the arenas grow to what a forward of 16 needs
	}
	for _, n := range []string{"r1", "r2"} {
		f0 := minorFaults(t, pid)
		done := load(n)
		per := float64(minorFaults(t, pid)-f0) / float64(max(done, 1))
		t.Logf("%s: %d requests, %.0f page faults per request", n, done, per)
		if per > 400 {
			t.Errorf("%s: %.0f page faults per request under load, want at most 400: freed memory is not kept", n, per)
		}
	}
}
