package daemon

import (
	"testing"
	"time"
)

// BenchmarkMetricsPerRequest is what the metrics add to one request: the updates the
// request path makes (status counter, latency, queue, pre/postprocess histograms, the
// TorchServe counters) plus one batch's share. Compare with a request's own cost in
// docs/benchmarks.md.
func BenchmarkMetricsPerRequest(b *testing.B) {
	m := newMetrics(true)
	mm := m.model("bench", "1.0", NewBatcher(1, 1, 0))
	start := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		mm.preprocess.UpdateDuration(start)
		mm.observeBatch(8, time.Millisecond, 50*time.Microsecond)
		mm.postprocess.UpdateDuration(start)
		mm.observeRequest(200, 3*time.Millisecond, time.Millisecond)
	}
}
