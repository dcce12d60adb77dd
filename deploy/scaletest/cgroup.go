package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// cpuLimit is a CFS quota on a cgroup, the mechanism behind a container's
// resources.limits.cpu: cgroup v1's cpu controller, or v2's cpu.max.
type cpuLimit struct {
	dir   string
	procs string // the file a pid is written to, to move it in
	v2    bool
}

const cfsPeriodUS = 100000

// newCPULimit creates the cgroup name with a quota of cpus CPUs.
func newCPULimit(name string, cpus float64) (*cpuLimit, error) {
	quota := strconv.Itoa(int(cpus * cfsPeriodUS))
	if fi, err := os.Stat("/sys/fs/cgroup/cpu"); err == nil && fi.IsDir() {
		c := &cpuLimit{dir: filepath.Join("/sys/fs/cgroup/cpu", name)}
		c.procs = filepath.Join(c.dir, "cgroup.procs")
		if err := os.Mkdir(c.dir, 0o755); err != nil && !os.IsExist(err) {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(c.dir, "cpu.cfs_period_us"), []byte(strconv.Itoa(cfsPeriodUS)), 0o644); err != nil {
			c.remove()
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(c.dir, "cpu.cfs_quota_us"), []byte(quota), 0o644); err != nil {
			c.remove()
			return nil, err
		}
		return c, nil
	}
	ctl, err := os.ReadFile("/sys/fs/cgroup/cgroup.subtree_control")
	if err != nil || !strings.Contains(string(ctl), "cpu") {
		return nil, fmt.Errorf("no cgroup cpu controller available (v1 /sys/fs/cgroup/cpu, or cpu in v2's subtree_control)")
	}
	c := &cpuLimit{dir: filepath.Join("/sys/fs/cgroup", name), v2: true}
	c.procs = filepath.Join(c.dir, "cgroup.procs")
	if err := os.Mkdir(c.dir, 0o755); err != nil && !os.IsExist(err) {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(c.dir, "cpu.max"), []byte(quota+" "+strconv.Itoa(cfsPeriodUS)), 0o644); err != nil {
		c.remove()
		return nil, err
	}
	return c, nil
}

// throttled returns how many CFS periods the cgroup was throttled in, and for how long in
// total (seconds): how often the replica wanted more than its limit.
func (c *cpuLimit) throttled() (periods int64, seconds float64) {
	if c == nil {
		return 0, 0
	}
	f, err := os.Open(filepath.Join(c.dir, "cpu.stat"))
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		k, v, _ := strings.Cut(s.Text(), " ")
		n, _ := strconv.ParseInt(v, 10, 64)
		switch k {
		case "nr_throttled":
			periods = n
		case "throttled_time": // v1, ns
			seconds = float64(n) / 1e9
		case "throttled_usec": // v2
			seconds = float64(n) / 1e6
		}
	}
	return periods, seconds
}

func (c *cpuLimit) remove() {
	if c != nil {
		os.Remove(c.dir)
	}
}
