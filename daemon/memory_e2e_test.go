package daemon_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// minorFaults is a process's minor page faults so far (/proc/PID/stat, field 10).
func minorFaults(tb testing.TB, pid int) int {
	tb.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		tb.Fatal(err)
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:]) // after "pid (comm) "
	n, err := strconv.Atoi(f[7])
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

// BenchmarkForwardPageFaults reports the server's minor page faults per request for resnet18
// at batch 16 under 32 concurrent clients, with keep_freed_memory on (the default) and off:
// kept, a forward reuses the last one's activation pages; off, glibc unmaps and trims them
// and each forward faults them in again. The count holds the whole process, the Go runtime's
// faults too, so it is a figure, not a test (torch's TestKeepFreedMemory asserts the
// mechanism on the forwarding thread alone):
//
//	go test -run '^$' -bench ForwardPageFaults -benchtime 320x ./daemon/
func BenchmarkForwardPageFaults(b *testing.B) {
	for _, keep := range []bool{true, false} {
		b.Run(fmt.Sprintf("keep_freed_memory=%v", keep), func(b *testing.B) {
			s := startServer(b, "--access-log=false", "--keep-freed-memory="+strconv.FormatBool(keep))
			s.register(b, "url=resnet18.mar&batch_size=16&max_batch_delay=0&initial_workers=1&synchronous=true")
			img, err := os.ReadFile(filepath.Join(zooDir, "resnet18", "sample_640x480.jpg"))
			if err != nil {
				b.Fatal(err)
			}
			load := func(n int) {
				forEach(n, 32, func(int) {
					if r := do(b, "POST", s.inf+"/predictions/resnet18", "image/jpeg", img); r.status != 200 {
						b.Errorf("predict: %d %s", r.status, r.body)
					}
				})
			}
			load(64) // the heaps grow to what a forward of 16 needs
			pid := s.cmd.Process.Pid
			b.ResetTimer()
			f0 := minorFaults(b, pid)
			load(b.N)
			b.ReportMetric(float64(minorFaults(b, pid)-f0)/float64(b.N), "faults/req")
		})
	}
}
