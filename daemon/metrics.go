package daemon

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// Metrics are served in the Prometheus text format on the metrics port. They live in one
// metrics.Set per server, not in the library's global set, so tests can run several daemons
// in one process.
type Metrics struct {
	set      *metrics.Set
	hostname string
	mu       sync.Mutex
	models   map[string]*modelMetrics // by name + "\x00" + version
	// off (enable_metrics_api = false) makes model return nil: a nil *modelMetrics records
	// nothing, so the request path makes no metric updates at all.
	off bool
}

// Buckets of the histograms: seconds from 100 µs to 30 s, and batch sizes in powers of two.
var (
	secondBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}
	batchBuckets  = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512}
)

func init() {
	// # HELP and # TYPE lines, so that histograms parse as histograms.
	metrics.ExposeMetadata(true)
}

func newMetrics(enabled bool) *Metrics {
	h, _ := os.Hostname()
	return &Metrics{set: metrics.NewSet(), hostname: h, models: map[string]*modelMetrics{}, off: !enabled}
}

// modelMetrics are one model version's series. Updating them costs a few atomic adds.
type modelMetrics struct {
	set           *metrics.Set
	labels        string
	queueTime     *metrics.PrometheusHistogram
	inferenceTime *metrics.PrometheusHistogram
	latency       *metrics.PrometheusHistogram
	batchSize     *metrics.PrometheusHistogram
	preprocess    *metrics.PrometheusHistogram
	postprocess   *metrics.PrometheusHistogram
	// TorchServe's names, so that existing dashboards keep working.
	tsRequests  *metrics.Counter
	tsLatencyUS *metrics.FloatCounter
	tsQueueUS   *metrics.FloatCounter

	workers atomic.Int64
	stuck   atomic.Int64
	codes   sync.Map // status code → *metrics.Counter

	// series are the names of every series above, codes included, so that unregistering
	// the version removes them all: a name that no longer exists keeps no series.
	seriesMu sync.Mutex
	series   []string
	dropped  bool
}

// track records a series name for drop.
func (mm *modelMetrics) track(name string) string {
	mm.seriesMu.Lock()
	mm.series = append(mm.series, name)
	mm.seriesMu.Unlock()
	return name
}

func (m *Metrics) model(name, version string, b *Batcher) *modelMetrics {
	if m.off {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	key := name + "\x00" + version
	if mm, ok := m.models[key]; ok {
		return mm
	}
	l := fmt.Sprintf(`model=%q,version=%q`, name, version)
	ts := fmt.Sprintf(`model_name=%q,model_version=%q,hostname=%q`, name, version, m.hostname)
	mm := &modelMetrics{set: m.set, labels: l}
	hist := func(n string, buckets []float64) *metrics.PrometheusHistogram {
		return m.set.GetOrCreatePrometheusHistogramExt(mm.track(n+"{"+l+"}"), buckets)
	}
	mm.queueTime = hist("torchd_queue_seconds", secondBuckets)
	mm.inferenceTime = hist("torchd_inference_seconds", secondBuckets)
	mm.latency = hist("torchd_request_seconds", secondBuckets)
	mm.batchSize = hist("torchd_batch_size", batchBuckets)
	mm.preprocess = hist("torchd_preprocess_seconds", secondBuckets)
	mm.postprocess = hist("torchd_postprocess_seconds", secondBuckets)
	mm.tsRequests = m.set.GetOrCreateCounter(mm.track("ts_inference_requests_total{" + ts + "}"))
	mm.tsLatencyUS = m.set.GetOrCreateFloatCounter(mm.track("ts_inference_latency_microseconds{" + ts + "}"))
	mm.tsQueueUS = m.set.GetOrCreateFloatCounter(mm.track("ts_queue_latency_microseconds{" + ts + "}"))
	gauge := func(n string, f func() float64) { m.set.GetOrCreateGauge(mm.track(n+"{"+l+"}"), f) }
	gauge("torchd_queue_depth", func() float64 { return float64(b.Pending()) })
	gauge("torchd_batch_size_limit", func() float64 { return float64(b.batchSize.Load()) })
	gauge("torchd_batch_delay_seconds", func() float64 { return time.Duration(b.maxDelay.Load()).Seconds() })
	gauge("torchd_workers", func() float64 { return float64(mm.workers.Load()) })
	gauge("torchd_stuck_workers", func() float64 { return float64(mm.stuck.Load()) })
	m.models[key] = mm
	return mm
}

// drop removes a model version's series: it is called when the version is unregistered or
// fails to load. A request still in flight updates its own counters, which are no longer
// written out; Prometheus treats the series as ended.
func (m *Metrics) drop(name, version string) {
	if m.off {
		return
	}
	m.mu.Lock()
	key := name + "\x00" + version
	mm := m.models[key]
	delete(m.models, key)
	m.mu.Unlock()
	if mm == nil {
		return
	}
	mm.seriesMu.Lock()
	defer mm.seriesMu.Unlock()
	for _, n := range mm.series {
		m.set.UnregisterMetric(n)
	}
	mm.series, mm.dropped = nil, true
}

// The observe methods do nothing on a nil receiver (metrics off).

func (mm *modelMetrics) setWorkers(n int) {
	if mm != nil {
		mm.workers.Store(int64(n))
	}
}

func (mm *modelMetrics) setStuck(n int) {
	if mm != nil {
		mm.stuck.Store(int64(n))
	}
}

func (mm *modelMetrics) observePreprocess(start time.Time) {
	if mm != nil {
		mm.preprocess.UpdateDuration(start)
	}
}

func (mm *modelMetrics) observePostprocess(start time.Time) {
	if mm != nil {
		mm.postprocess.UpdateDuration(start)
	}
}

func (mm *modelMetrics) observeBatch(size int, d time.Duration) {
	if mm == nil {
		return
	}
	mm.batchSize.Update(float64(size))
	mm.inferenceTime.Update(d.Seconds())
}

func (mm *modelMetrics) observeRequest(code int, total, queued time.Duration) {
	if mm == nil {
		return
	}
	c, ok := mm.codes.Load(code)
	if !ok {
		// Under seriesMu, so that a request finishing after drop creates no series.
		mm.seriesMu.Lock()
		if mm.dropped {
			mm.seriesMu.Unlock()
			return
		}
		name := "torchd_requests_total{" + mm.labels + `,code="` + strconv.Itoa(code) + `"}`
		c, _ = mm.codes.LoadOrStore(code, mm.set.GetOrCreateCounter(name))
		mm.series = append(mm.series, name)
		mm.seriesMu.Unlock()
	}
	c.(*metrics.Counter).Inc()
	mm.latency.Update(total.Seconds())
	mm.tsRequests.Inc()
	mm.tsLatencyUS.Add(float64(total.Microseconds()))
	mm.tsQueueUS.Add(float64(queued.Microseconds()))
	if queued > 0 {
		mm.queueTime.Update(queued.Seconds())
	}
}

// WritePrometheus writes every series, then the process metrics (CPU, RSS, goroutines, GC).
func (m *Metrics) WritePrometheus(w io.Writer) {
	m.set.WritePrometheus(w)
	metrics.WriteProcessMetrics(w)
	metrics.WriteFDMetrics(w) // process_open_fds and process_max_fds
}
