package cpustat

import (
	"math"
	"testing"
)

func TestParseCPUTimes(t *testing.T) {
	got, ok := parse("cpu  4705 150 1120 16250 520 0 31 87 0 0")
	if want := (Times{Total: 4705 + 150 + 1120 + 16250 + 520 + 0 + 31 + 87, Idle: 16250 + 520, Steal: 87}); !ok || got != want {
		t.Errorf("parse = %+v, %v; want %+v", got, ok, want)
	}
	for _, bad := range []string{"", "cpu0 1 2 3 4 5 6 7 8", "cpu 1 2 3", "cpu 1 2 3 4 5 6 7 x"} {
		if _, ok := parse(bad); ok {
			t.Errorf("parse(%q) ok", bad)
		}
	}
	if _, ok := Read(); !ok {
		t.Log("no /proc/stat here: windows are not corrected for stolen time")
	}
}

func TestShares(t *testing.T) {
	for _, c := range []struct {
		a, b        Times
		steal, idle float64
		idleOK      bool
	}{
		{Times{1000, 300, 10}, Times{1400, 400, 110}, 0.25, 0.25, true},
		{Times{1000, 300, 10}, Times{1400, 300, 10}, 0, 0, true},
		{Times{1000, 300, 10}, Times{1400, 700, 400}, MaxSteal, 1, true}, // bounded
		{Times{1000, 300, 10}, Times{1000, 300, 10}, 0, 0, false},        // no time passed
		{Times{1000, 300, 10}, Times{900, 200, 5}, 0, 0, false},          // counters went back (not a reading to trust)
	} {
		if got := StealShare(c.a, c.b); math.Abs(got-c.steal) > 1e-9 {
			t.Errorf("StealShare(%+v, %+v) = %v, want %v", c.a, c.b, got, c.steal)
		}
		if got, ok := IdleShare(c.a, c.b); math.Abs(got-c.idle) > 1e-9 || ok != c.idleOK {
			t.Errorf("IdleShare(%+v, %+v) = %v, %v; want %v, %v", c.a, c.b, got, ok, c.idle, c.idleOK)
		}
	}
}
