package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat: 100 on every
// Linux this runs on.
const clockTicks = 100

// procTree is a server process and every process under it (TorchServe's launcher starts a
// JVM, which starts one Python process per worker).
type procTree struct{ root int }

// pids lists root and its descendants, from each process's parent in /proc/<pid>/stat.
func (t procTree) pids() []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return []int{t.root}
	}
	children := map[int][]int{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := readStat(pid); ok {
			children[st.ppid] = append(children[st.ppid], pid)
		}
	}
	out := []int{t.root}
	for i := 0; i < len(out); i++ {
		out = append(out, children[out[i]]...)
	}
	return out
}

type procStat struct {
	ppid       int
	cpuSeconds float64
}

// readStat reads a process's parent and CPU time (user + system) from /proc/<pid>/stat.
func readStat(pid int) (procStat, bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return procStat{}, false
	}
	// The command name is in parentheses and may hold spaces; fields follow the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return procStat{}, false
	}
	// f[0] is the state (field 3); ppid is field 4, utime 14, stime 15.
	ppid, _ := strconv.Atoi(f[1])
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return procStat{ppid: ppid, cpuSeconds: (ut + st) / clockTicks}, true
}

// statusKB reads a "Key:   N kB" line of /proc/<pid>/status.
func statusKB(pid int, key string) int64 {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, key+":"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n
			}
		}
	}
	return 0
}

// cpuSeconds is the CPU time the tree's live processes have used.
func (t procTree) cpuSeconds(pids []int) float64 {
	total := 0.0
	for _, p := range pids {
		if st, ok := readStat(p); ok {
			total += st.cpuSeconds
		}
	}
	return total
}

// rssBytes is the tree's resident memory now.
func (t procTree) rssBytes(pids []int) int64 {
	var kb int64
	for _, p := range pids {
		kb += statusKB(p, "VmRSS")
	}
	return kb << 10
}

// sampler records a tree's peak resident memory while a measurement runs.
type sampler struct {
	tree procTree
	stop chan struct{}
	done chan struct{}
	mu   sync.Mutex
	peak int64
}

// sampleEvery is how often RSS is read: often enough to see a batch's buffers, rarely enough
// that reading /proc costs nothing measurable.
const sampleEvery = 200 * time.Millisecond

func startSampler(t procTree) *sampler {
	s := &sampler{tree: t, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		pids := t.pids()
		tick := time.NewTicker(sampleEvery)
		defer tick.Stop()
		for n := 0; ; n++ {
			if n%10 == 9 {
				pids = t.pids() // workers may have restarted
			}
			rss := t.rssBytes(pids)
			s.mu.Lock()
			s.peak = max(s.peak, rss)
			s.mu.Unlock()
			select {
			case <-s.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

// finish stops sampling and returns the peak.
func (s *sampler) finish() int64 {
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return max(s.peak, s.tree.rssBytes(s.tree.pids()))
}

// stolenSeconds is the CPU time the hypervisor took from this VM, summed over CPUs (the
// steal column of /proc/stat).
func stolenSeconds() float64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0
	}
	v, _ := strconv.ParseFloat(f[8], 64)
	return v / clockTicks
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
