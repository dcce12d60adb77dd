// Package cpustat reads the machine's CPU time and the part of it a hypervisor stole, for
// the self-tuning batching (daemon) and its benchmark (bench/autobatch).
package cpustat

import (
	"bytes"
	"os"
	"strconv"
	"strings"
)

// Read returns the machine's CPU time so far, in clock ticks, and the part of it the
// hypervisor stole: time a virtual CPU of this machine wanted to run and the host ran
// something else. It reads the "cpu" line of /proc/stat (user nice system idle iowait irq
// softirq steal); ok is false where there is none.
func Read() (total, steal uint64, ok bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, false
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	return parse(string(line))
}

// parse reads the first line of /proc/stat.
func parse(line string) (total, steal uint64, ok bool) {
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0, false
	}
	for i, s := range f[1:9] {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, 0, false
		}
		total += v
		if i == 7 {
			steal = v
		}
	}
	return total, steal, true
}

// MaxSteal bounds the stolen share StealShare reports: a rate divided by 1 − the share is
// at most doubled.
const MaxSteal = 0.5

// StealShare is the share of the machine's CPU time the hypervisor stole between two
// readings of Read, at most MaxSteal (0 if the counters did not advance).
//
// On a shared VM it swings the served rate more than any batch setting does: on the 2-core
// development VM, eight 6-second runs of resnet18 at one setting served 14.7–23.1 req/s with
// 0–28% of the CPU time stolen; divided by (1 − the stolen share) they span 18.9–23.6. The
// division assumes the rate follows the CPU time the machine got: near enough for a model
// that keeps the CPUs busy, rough for one that does not. On a machine of its own nothing is
// stolen and nothing changes.
func StealShare(t0, s0, t1, s1 uint64) float64 {
	if t1 <= t0 || s1 < s0 {
		return 0
	}
	return min(MaxSteal, float64(s1-s0)/float64(t1-t0))
}
