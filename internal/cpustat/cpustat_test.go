package cpustat

import (
	"math"
	"testing"
)

func TestParseCPUTimes(t *testing.T) {
	total, steal, ok := parse("cpu  4705 150 1120 16250 520 0 31 87 0 0")
	if !ok || total != 4705+150+1120+16250+520+0+31+87 || steal != 87 {
		t.Errorf("parse = %d, %d, %v", total, steal, ok)
	}
	for _, bad := range []string{"", "cpu0 1 2 3 4 5 6 7 8", "cpu 1 2 3", "cpu 1 2 3 4 5 6 7 x"} {
		if _, _, ok := parse(bad); ok {
			t.Errorf("parse(%q) ok", bad)
		}
	}
	if _, _, ok := Read(); !ok {
		t.Log("no /proc/stat here: windows are not corrected for stolen time")
	}
}

func TestStealShare(t *testing.T) {
	for _, c := range []struct {
		t0, s0, t1, s1 uint64
		want           float64
	}{
		{1000, 10, 1400, 110, 0.25},
		{1000, 10, 1400, 10, 0},
		{1000, 10, 1400, 400, MaxSteal}, // bounded
		{1000, 10, 1000, 10, 0},         // no time passed
		{1000, 10, 900, 5, 0},           // counters went back (not a reading to trust)
	} {
		if got := StealShare(c.t0, c.s0, c.t1, c.s1); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("StealShare(%d, %d, %d, %d) = %v, want %v", c.t0, c.s0, c.t1, c.s1, got, c.want)
		}
	}
}
