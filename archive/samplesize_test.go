package archive

import (
	"math"
	"strings"
	"testing"
)

func TestSampleBytes(t *testing.T) {
	for _, c := range []struct {
		shape []int64
		size  int64
		want  int64 // -1: an error
	}{
		{[]int64{-1, 3, 224, 224}, 4, 3 * 224 * 224 * 4},
		{[]int64{}, 8, 8},
		{[]int64{-1, -1}, 2, 2},
		{[]int64{1 << 28}, 4, 1 << 30},
		{[]int64{1<<28 + 1}, 4, -1},
		{[]int64{-1, 100000, 100000, 100000}, 4, -1},
		{[]int64{math.MaxInt64, math.MaxInt64}, 1, -1},
		{[]int64{1 << 32, 1 << 32}, 1, -1}, // wraps to 0 in int64
	} {
		got, err := SampleBytes(c.shape, c.size)
		if c.want < 0 {
			if err == nil || !strings.Contains(err.Error(), "holds more than") {
				t.Errorf("%v × %d: %d, %v; want an error", c.shape, c.size, got, err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%v × %d: %d, %v; want %d", c.shape, c.size, got, err, c.want)
		}
	}
}
