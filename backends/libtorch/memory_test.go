package libtorch_test

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/torchd/torchd/torch"
)

var keepFreed = flag.Bool("keep-freed-memory", true, "BenchmarkForwardPageFaults: call torch.KeepFreedMemory first, as the daemon does by default")

// minorFaults is this process's minor page faults so far (/proc/self/stat, field 10).
func minorFaults(tb testing.TB) int {
	tb.Helper()
	b, err := os.ReadFile("/proc/self/stat")
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

// BenchmarkForwardPageFaults reports the minor page faults per request for resnet18 at batch
// 16 under 32 concurrent clients, with keep_freed_memory on (the default) and off: kept, a
// forward reuses the last one's activation pages; off, glibc unmaps and trims them and each
// forward faults them in again. KeepFreedMemory is process-wide and one-way, so each setting
// is its own run; the count holds the whole process, the Go runtime's faults too, so it is a
// figure, not a test (torch's TestKeepFreedMemory asserts the mechanism on the forwarding
// thread alone):
//
//	go test -run '^$' -bench ForwardPageFaults -benchtime 320x ./backends/libtorch/
//	go test -run '^$' -bench ForwardPageFaults -benchtime 320x ./backends/libtorch/ -keep-freed-memory=false
func BenchmarkForwardPageFaults(b *testing.B) {
	if *keepFreed && !torch.KeepFreedMemory() {
		b.Log("keep_freed_memory: the C library is not glibc; its allocator's defaults stay")
	}
	b.Run(fmt.Sprintf("keep_freed_memory=%v", *keepFreed), func(b *testing.B) {
		s := newServer(b, 0)
		s.register(b, "url=resnet18.mar&batch_size=16&max_batch_delay=0&initial_workers=1&synchronous=true")
		img, err := os.ReadFile(filepath.Join(zooDir, "resnet18", "sample_640x480.jpg"))
		if err != nil {
			b.Fatal(err)
		}
		load := func(n int) {
			forEach(n, 32, func(int) {
				if r := s.do("POST", "/predictions/resnet18", "image/jpeg", img); r.status != 200 {
					b.Errorf("predict: %d %s", r.status, r.body)
				}
			})
		}
		load(64) // the heaps grow to what a forward of 16 needs
		b.ResetTimer()
		f0 := minorFaults(b)
		load(b.N)
		b.ReportMetric(float64(minorFaults(b)-f0)/float64(b.N), "faults/req")
	})
}
