// Package metricscmp measures what one request's metric updates cost with each of the two
// well-kept Go metrics libraries, prometheus/client_golang and VictoriaMetrics/metrics, so
// that torchd keeps the cheaper one (issue 6). It is a module of its own so that the library
// torchd does not use stays out of torchd's go.mod.
//
//	cd bench/metricscmp && go test -bench . -count 6 | tee out.txt && benchstat out.txt
//
// Both sides make exactly the updates frontend/metrics/metrics.go makes per request: six histograms
// (queue, inference, request, batch size, preprocess, postprocess), the request counter by
// status code, and TorchServe's three counters.
package metricscmp

import (
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	vm "github.com/VictoriaMetrics/metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
)

var (
	secondBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}
	batchBuckets  = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512}
)

// ---- VictoriaMetrics/metrics, as frontend/metrics/metrics.go uses it ----

type vmModel struct {
	set                                                 *vm.Set
	labels                                              string
	queue, inference, latency, batch, preproc, postproc *vm.PrometheusHistogram
	tsRequests                                          *vm.Counter
	tsLatency, tsQueue                                  *vm.FloatCounter
	codes                                               map[int]*vm.Counter
}

func newVM() *vmModel {
	s := vm.NewSet()
	l := `model="digits",version="1.0"`
	ts := `model_name="digits",model_version="1.0",hostname="h"`
	h := func(n string, b []float64) *vm.PrometheusHistogram {
		return s.GetOrCreatePrometheusHistogramExt(n+"{"+l+"}", b)
	}
	m := &vmModel{set: s, labels: l,
		queue: h("torchd_queue_seconds", secondBuckets), inference: h("torchd_inference_seconds", secondBuckets),
		latency: h("torchd_request_seconds", secondBuckets), batch: h("torchd_batch_size", batchBuckets),
		preproc: h("torchd_preprocess_seconds", secondBuckets), postproc: h("torchd_postprocess_seconds", secondBuckets),
		tsRequests: s.GetOrCreateCounter("ts_inference_requests_total{" + ts + "}"),
		tsLatency:  s.GetOrCreateFloatCounter("ts_inference_latency_microseconds{" + ts + "}"),
		tsQueue:    s.GetOrCreateFloatCounter("ts_queue_latency_microseconds{" + ts + "}"),
		codes:      map[int]*vm.Counter{},
	}
	m.codes[200] = s.GetOrCreateCounter("torchd_requests_total{" + l + `,code="200"}`)
	return m
}

func (m *vmModel) request(code int, pre, inf, post, total, queued time.Duration, batch int) {
	m.preproc.Update(pre.Seconds())
	m.batch.Update(float64(batch))
	m.inference.Update(inf.Seconds())
	m.postproc.Update(post.Seconds())
	m.codes[code].Inc()
	m.latency.Update(total.Seconds())
	m.tsRequests.Inc()
	m.tsLatency.Add(float64(total.Microseconds()))
	m.tsQueue.Add(float64(queued.Microseconds()))
	m.queue.Update(queued.Seconds())
}

// ---- prometheus/client_golang, the same series ----

type promModel struct {
	reg                                                 *prometheus.Registry
	queue, inference, latency, batch, preproc, postproc prometheus.Observer
	codes                                               *prometheus.CounterVec
	tsRequests, tsLatency, tsQueue                      prometheus.Counter
}

func newProm() *promModel {
	r := prometheus.NewRegistry()
	labels := prometheus.Labels{"model": "digits", "version": "1.0"}
	ts := prometheus.Labels{"model_name": "digits", "model_version": "1.0", "hostname": "h"}
	h := func(n string, b []float64) prometheus.Observer {
		v := prometheus.NewHistogram(prometheus.HistogramOpts{Name: n, Help: n, Buckets: b, ConstLabels: labels})
		r.MustRegister(v)
		return v
	}
	c := func(n string) prometheus.Counter {
		v := prometheus.NewCounter(prometheus.CounterOpts{Name: n, Help: n, ConstLabels: ts})
		r.MustRegister(v)
		return v
	}
	codes := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "torchd_requests_total", Help: "requests", ConstLabels: labels}, []string{"code"})
	r.MustRegister(codes)
	return &promModel{reg: r,
		queue: h("torchd_queue_seconds", secondBuckets), inference: h("torchd_inference_seconds", secondBuckets),
		latency: h("torchd_request_seconds", secondBuckets), batch: h("torchd_batch_size", batchBuckets),
		preproc: h("torchd_preprocess_seconds", secondBuckets), postproc: h("torchd_postprocess_seconds", secondBuckets),
		codes: codes, tsRequests: c("ts_inference_requests_total"),
		tsLatency: c("ts_inference_latency_microseconds"), tsQueue: c("ts_queue_latency_microseconds"),
	}
}

func (m *promModel) request(code int, pre, inf, post, total, queued time.Duration, batch int) {
	m.preproc.Observe(pre.Seconds())
	m.batch.Observe(float64(batch))
	m.inference.Observe(inf.Seconds())
	m.postproc.Observe(post.Seconds())
	m.codes.WithLabelValues(strconv.Itoa(code)).Inc()
	m.latency.Observe(total.Seconds())
	m.tsRequests.Inc()
	m.tsLatency.Add(float64(total.Microseconds()))
	m.tsQueue.Add(float64(queued.Microseconds()))
	m.queue.Observe(queued.Seconds())
}

const (
	pre, inf, post, total, queued = 120 * time.Microsecond, 2 * time.Millisecond, 30 * time.Microsecond, 3 * time.Millisecond, 700 * time.Microsecond
)

// The hot path: one request's updates, from one goroutine and from all cores at once
// (requests finish on many goroutines).
func BenchmarkRequestVictoriaMetrics(b *testing.B) {
	m := newVM()
	b.ReportAllocs()
	for b.Loop() {
		m.request(200, pre, inf, post, total, queued, 8)
	}
}

func BenchmarkRequestClientGolang(b *testing.B) {
	m := newProm()
	b.ReportAllocs()
	for b.Loop() {
		m.request(200, pre, inf, post, total, queued, 8)
	}
}

func BenchmarkRequestParallelVictoriaMetrics(b *testing.B) {
	m := newVM()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.request(200, pre, inf, post, total, queued, 8)
		}
	})
}

func BenchmarkRequestParallelClientGolang(b *testing.B) {
	m := newProm()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.request(200, pre, inf, post, total, queued, 8)
		}
	})
}

// A scrape of the same series.
func BenchmarkScrapeVictoriaMetrics(b *testing.B) {
	m := newVM()
	m.request(200, pre, inf, post, total, queued, 8)
	b.ReportAllocs()
	for b.Loop() {
		m.set.WritePrometheus(io.Discard)
	}
}

func BenchmarkScrapeClientGolang(b *testing.B) {
	m := newProm()
	m.request(200, pre, inf, post, total, queued, 8)
	b.ReportAllocs()
	for b.Loop() {
		mfs, err := m.reg.Gather()
		if err != nil {
			b.Fatal(err)
		}
		enc := expfmt.NewEncoder(io.Discard, expfmt.NewFormat(expfmt.TypeTextPlain))
		for _, mf := range mfs {
			if err := enc.Encode(mf); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// Both expose the same counts: a check that the comparison compares like with like.
func TestSameSeries(t *testing.T) {
	v, p := newVM(), newProm()
	for i := 0; i < 10; i++ {
		v.request(200, pre, inf, post, total, queued, 8)
		p.request(200, pre, inf, post, total, queued, 8)
	}
	mfs, err := p.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var hist int
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if h := m.GetHistogram(); h != nil {
				hist++
				if h.GetSampleCount() != 10 {
					t.Errorf("%s: %d samples, want 10", mf.GetName(), h.GetSampleCount())
				}
			}
		}
	}
	if hist != 6 {
		t.Errorf("client_golang: %d histograms, want 6", hist)
	}
	var out strings.Builder
	v.set.WritePrometheus(&out)
	if want := `torchd_request_seconds_count{model="digits",version="1.0"} 10`; !strings.Contains(out.String(), want) {
		t.Errorf("VictoriaMetrics exposition lacks %q:\n%s", want, out.String())
	}
}
