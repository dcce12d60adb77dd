// Package cpustat reads the machine's CPU time, the part of it that was idle and the part a
// hypervisor stole, for the self-tuning batching (daemon) and its benchmark (bench/autobatch).
package cpustat

import (
	"bytes"
	"os"
	"strconv"
	"strings"
)

// Times are the machine's CPU times so far, in clock ticks, summed over its CPUs: all of
// it, the idle part (idle and iowait) and the stolen part (time a virtual CPU of this
// machine wanted to run and the host ran something else).
type Times struct {
	Total, Idle, Steal uint64
}

// Read reads the "cpu" line of /proc/stat (user nice system idle iowait irq softirq steal);
// ok is false where there is none.
func Read() (t Times, ok bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return Times{}, false
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	return parse(string(line))
}

// parse reads the first line of /proc/stat.
func parse(line string) (t Times, ok bool) {
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return Times{}, false
	}
	for i, s := range f[1:9] {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return Times{}, false
		}
		t.Total += v
		switch i {
		case 3, 4:
			t.Idle += v
		case 7:
			t.Steal = v
		}
	}
	return t, true
}

// MaxSteal bounds the stolen share StealShare reports: a rate divided by 1 − the share is
// at most doubled.
const MaxSteal = 0.5

// StealShare is the share of the machine's CPU time the hypervisor stole between two
// readings of Read, at most MaxSteal (0 if the counters did not advance).
//
// On a shared VM it swings the served rate more than any batch setting does, and dividing
// the rate by (1 − the stolen share) narrows the spread of runs at one setting by about half
// (docs/design/self-tuning.md). The division assumes the rate follows the CPU time the machine got: near enough for a model
// that keeps the CPUs busy, rough for one that does not. On a machine of its own nothing is
// stolen and nothing changes.
func StealShare(a, b Times) float64 {
	if b.Total <= a.Total || b.Steal < a.Steal {
		return 0
	}
	return min(MaxSteal, float64(b.Steal-a.Steal)/float64(b.Total-a.Total))
}

// IdleShare is the share of the machine's CPU time that was idle between two readings of
// Read, and whether the counters advanced.
func IdleShare(a, b Times) (float64, bool) {
	if b.Total <= a.Total || b.Idle < a.Idle {
		return 0, false
	}
	return min(1, float64(b.Idle-a.Idle)/float64(b.Total-a.Total)), true
}
