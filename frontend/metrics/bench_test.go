package metrics

import (
	"testing"
	"time"

	"github.com/torchd/torchd/core"
)

// BenchmarkMetricsPerRequest is what the metrics add to one request: the updates the
// request path makes (status counter, latency, queue, pre/postprocess histograms, the
// TorchServe counters) plus one batch's share. Compare with a request's own cost in
// docs/benchmarks.md.
func BenchmarkMetricsPerRequest(b *testing.B) {
	m := New(true)
	mm := m.Version(&core.ModelVersion{Name: "bench", Version: "1.0"}).(*modelMetrics)
	start := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		mm.preprocess.UpdateDuration(start)
		mm.Batch(8, time.Millisecond, 50*time.Microsecond)
		mm.postprocess.UpdateDuration(start)
		mm.Request(nil, 3*time.Millisecond, time.Millisecond, false)
	}
}
