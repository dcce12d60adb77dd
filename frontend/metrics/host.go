package metrics

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// hostMetrics are TorchServe's system metrics from its default metrics.yaml (CPUUtilization,
// Memory*, Disk*; Level="Host"), computed as its system_metrics.py computes them with psutil:
// memory from /proc/meminfo, the disk of "/", and the CPU busy share since the last scrape.
// They are read when scraped, so they cost nothing between scrapes.
type hostMetrics struct {
	mu                sync.Mutex
	lastBusy, lastAll uint64
}

func (m *Metrics) registerHostMetrics() {
	host := `{Level="Host",Hostname=` + strconv.Quote(m.hostname) + `}`
	h := &hostMetrics{}
	const mb, gb = 1 << 20, 1 << 30
	mem := func(f func(total, avail, used float64) float64) func() float64 {
		return func() float64 {
			total, avail, used, ok := readMemInfo()
			if !ok {
				return 0
			}
			return f(total, avail, used)
		}
	}
	disk := func(f func(used, avail float64) float64) func() float64 {
		return func() float64 {
			var st syscall.Statfs_t
			if syscall.Statfs("/", &st) != nil {
				return 0
			}
			bs := float64(st.Bsize)
			return f(float64(st.Blocks-st.Bfree)*bs, float64(st.Bavail)*bs)
		}
	}
	m.set.NewGauge("CPUUtilization"+host, h.cpuPercent)
	m.set.NewGauge("MemoryUsed"+host, mem(func(_, _, used float64) float64 { return used / mb }))
	m.set.NewGauge("MemoryAvailable"+host, mem(func(_, avail, _ float64) float64 { return avail / mb }))
	m.set.NewGauge("MemoryUtilization"+host, mem(func(total, avail, _ float64) float64 { return 100 * (total - avail) / total }))
	m.set.NewGauge("DiskUsage"+host, disk(func(used, _ float64) float64 { return used / gb }))
	m.set.NewGauge("DiskAvailable"+host, disk(func(_, avail float64) float64 { return avail / gb }))
	m.set.NewGauge("DiskUtilization"+host, disk(func(used, avail float64) float64 {
		if used+avail == 0 {
			return 0
		}
		return 100 * used / (used + avail)
	}))
}

// readMemInfo returns bytes of memory in all, available, and used as psutil counts it
// (total − free − buffers − cached, cached including reclaimable slab).
func readMemInfo() (total, avail, used float64, ok bool) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, 0, 0, false
	}
	kb := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 {
			v, _ := strconv.ParseFloat(f[1], 64)
			kb[strings.TrimSuffix(f[0], ":")] = v * 1024
		}
	}
	total, avail = kb["MemTotal"], kb["MemAvailable"]
	if total == 0 {
		return 0, 0, 0, false
	}
	used = total - kb["MemFree"] - kb["Buffers"] - kb["Cached"] - kb["SReclaimable"]
	if used < 0 {
		used = total - kb["MemFree"]
	}
	return total, avail, used, true
}

// cpuPercent is the share of CPU time spent busy since the previous scrape (psutil's
// cpu_percent() without an interval); the first scrape counts since boot.
func (h *hostMetrics) cpuPercent() float64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 5 || f[0] != "cpu" {
		return 0
	}
	var all, idle uint64
	for i, s := range f[1:] {
		v, _ := strconv.ParseUint(s, 10, 64)
		if i >= 8 { // guest time is counted in user time already
			break
		}
		all += v
		if i == 3 || i == 4 { // idle, iowait
			idle += v
		}
	}
	busy := all - idle
	h.mu.Lock()
	defer h.mu.Unlock()
	dAll, dBusy := all-h.lastAll, busy-h.lastBusy
	h.lastAll, h.lastBusy = all, busy
	if dAll == 0 {
		return 0
	}
	return 100 * float64(dBusy) / float64(dAll)
}
