package webui

import (
	"math"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/torchd/torchd/core"
)

// Every file the page refers to is embedded, and served with a real content type.
func TestUIAssets(t *testing.T) {
	index, ok := uiAssets["index.html"]
	if !ok {
		t.Fatal("no index.html")
	}
	refs := regexp.MustCompile(`(?:src|href)="/ui/([^"]+)"`).FindAllStringSubmatch(string(index.body), -1)
	if len(refs) < 3 {
		t.Fatalf("index.html refers to %d files", len(refs))
	}
	for _, r := range refs {
		if _, ok := uiAssets[r[1]]; !ok {
			t.Errorf("index.html refers to /ui/%s, which is not embedded", r[1])
		}
	}
	for name, a := range uiAssets {
		if a.contentType == "application/octet-stream" {
			t.Errorf("%s: no content type", name)
		}
	}
}

func TestHistogramQuantile(t *testing.T) {
	inf := math.Inf(1)
	h := histogramCounts{le: []float64{0.001, 0.0025, 0.005, inf}, counts: []float64{0, 3, 4, 4}}
	for _, c := range []struct{ q, want float64 }{{0.5, 0.002}, {0.75, 0.0025}, {0.99, 0.0049}} {
		if got := h.quantile(c.q); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("q%.2f = %v, want %v", c.q, got, c.want)
		}
	}
	// Past the last finite bound, the largest finite bound, as histogram_quantile.
	h = histogramCounts{le: []float64{0.001, inf}, counts: []float64{1, 10}}
	if got := h.quantile(0.99); got != 0.001 {
		t.Errorf("in +Inf: %v", got)
	}
	if got := (histogramCounts{le: []float64{inf}, counts: []float64{0}}).quantile(0.5); !math.IsNaN(got) {
		t.Errorf("empty: %v", got)
	}
}

// The ring keeps the last statsPoints points, oldest first; rates and batch sizes are the
// differences of the counters.
func TestStatsSeries(t *testing.T) {
	var s statsSeries
	t0 := time.Unix(1000, 0)
	inf := math.Inf(1)
	for i := range statsPoints + 10 {
		c := statsCounters{batches: int64(i), items: int64(4 * i),
			latency: histogramCounts{le: []float64{0.01, inf}, counts: []float64{float64(10 * i), float64(10 * i)}}}
		s.add(t0.Add(time.Duration(i)*statsInterval), c, float64(i))
	}
	var st uiStats
	st.series = map[*core.ModelVersion]*statsSeries{nil: &s}
	r := st.snapshot()
	c := r.Models[0]
	if len(c.Time) != statsPoints {
		t.Fatalf("%d points", len(c.Time))
	}
	if !slices.IsSorted(c.Time) || c.Time[len(c.Time)-1] != t0.Add((statsPoints+9)*statsInterval).UnixMilli() {
		t.Errorf("times %v … %v", c.Time[0], c.Time[len(c.Time)-1])
	}
	if *c.RPS[0] != 5 || *c.Batch[0] != 4 || *c.P50[0] != 5 || *c.Queue[len(c.Queue)-1] != statsPoints+9 {
		t.Errorf("rps %v batch %v p50 %v queue %v", *c.RPS[0], *c.Batch[0], *c.P50[0], *c.Queue[len(c.Queue)-1])
	}
	// No batches and no requests: no batch size and no latency, but a rate of 0.
	s2 := statsSeries{}
	s2.add(t0, statsCounters{}, 0)
	s2.add(t0.Add(statsInterval), statsCounters{}, 0)
	st.series = map[*core.ModelVersion]*statsSeries{nil: &s2}
	c = st.snapshot().Models[0]
	if c.Batch[0] != nil || c.P50[0] != nil || c.RPS[0] == nil || *c.RPS[0] != 0 {
		t.Errorf("idle point: %+v", c)
	}
}
