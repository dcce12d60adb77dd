package handlerproc

import (
	"bytes"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// A handler's memory is the process's own: torchd bounds it with a watchdog on each
// process's resident set (RSS), not RLIMIT_AS, since a Python that imports torch maps
// gigabytes of address space it never touches (the CUDA libraries among them).

// allocDefaults are allocator settings for handler processes, each unless the environment
// sets it. glibc raises its mmap threshold to the size of the largest block freed, so after
// the first batch a batch's activations (blocks of megabytes) come from the heap and stay
// there when freed. Fixed at 12 MiB, a large batch's blocks are mapped and returned as it
// frees them, while a batch of one's stay in the heap; a lower threshold makes every small
// forward pay page faults. A fixed mmap threshold also fixes glibc's trim threshold at
// 128 KiB: the heap's top, freed after each request, would go back to the system and be
// faulted in again by the next, so it is raised to 16 MiB (docs/benchmarks.md has the
// measurements; bench/handlerproc/c1_faults.py). Either variable in torchd's environment
// chooses another (33554432 is where glibc's own mmap threshold ends up).
//
// A mapped block is faulted in page by page at every batch: resnet18 at batch 32 took
// 5,000-5,900 minor faults and 10-14 ms of system time a request in each process. With
// THP_MEM_ALLOC_ENABLE=1 torch asks transparent huge pages for its tensors of 2 MiB and
// more (madvise, which is what THP's "madvise" mode serves): a tenth of the faults, and
// the blocks still go back when freed (bench/handlerproc/faults.sh). THP_MEM_ALLOC_ENABLE=0
// in torchd's environment turns it off.
//
// Why 12 MiB: torch aligns those tensors to 2 MiB, and glibc serves an aligned block by
// asking for its size plus the alignment. resnet18's largest block at batch 1 (the 7.4 MB
// unrolled input of its first convolution) asks 9.4 MB: with an 8 MiB threshold it was
// mapped and unmapped at every request (2,300 faults each) in a fifth of processes, those
// whose heap held no free block that large.
var allocDefaults = []string{"MALLOC_MMAP_THRESHOLD_=12582912", "MALLOC_TRIM_THRESHOLD_=16777216", "THP_MEM_ALLOC_ENABLE=1"}

// withAllocDefaults adds each of allocDefaults to env whose variable env does not set.
func withAllocDefaults(env []string) []string {
	for _, d := range allocDefaults {
		name := d[:strings.IndexByte(d, '=')+1]
		if !slices.ContainsFunc(env, func(e string) bool { return strings.HasPrefix(e, name) }) {
			env = append(env, d)
		}
	}
	return env
}

// memoryPoll is how often the watchdog reads each process's RSS.
const memoryPoll = 500 * time.Millisecond

// rss is pid's resident set size in bytes, from /proc/PID/statm; 0 when it is gone.
func rss(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/statm")
	if err != nil {
		return 0
	}
	f := bytes.Fields(b)
	if len(f) < 2 {
		return 0
	}
	pages, err := strconv.ParseInt(string(f[1]), 10, 64)
	if err != nil {
		return 0
	}
	return pages * int64(os.Getpagesize())
}

// RSS is the resident memory of the model's handler processes together, with every process
// they started and their supervisors, in bytes.
func (m *Model) RSS() int64 {
	procs := readProcs() // once for every process: a scan of /proc reads each process's stat
	m.mu.Lock()
	defer m.mu.Unlock()
	var n int64
	for p := range m.live {
		n += procs.treeRSS(p.pid)
	}
	return n
}

// watchMemory kills a process whose tree's RSS passes cfg.MemoryLimit: the batch it runs fails,
// and it is replaced as after a crash (an idle one is replaced before it takes a batch).
func (m *Model) watchMemory() {
	defer m.wg.Done()
	t := time.NewTicker(memoryPoll)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
		procs := readProcs()
		m.mu.Lock()
		for p := range m.live {
			if r := procs.treeRSS(p.pid); r > m.cfg.MemoryLimit && p.overLimit.CompareAndSwap(0, r) {
				m.cfg.Log.Error("handler process over its memory limit: killed", "model", m.cfg.ModelName, "pid", p.pid,
					"rss_mib", r>>20, "limit_mib", m.cfg.MemoryLimit>>20)
				p.stop()
			}
		}
		m.mu.Unlock()
	}
}
