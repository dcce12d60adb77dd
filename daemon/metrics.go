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
	mm := &modelMetrics{
		set:           m.set,
		labels:        l,
		queueTime:     m.set.GetOrCreatePrometheusHistogramExt("torchd_queue_seconds{"+l+"}", secondBuckets),
		inferenceTime: m.set.GetOrCreatePrometheusHistogramExt("torchd_inference_seconds{"+l+"}", secondBuckets),
		latency:       m.set.GetOrCreatePrometheusHistogramExt("torchd_request_seconds{"+l+"}", secondBuckets),
		batchSize:     m.set.GetOrCreatePrometheusHistogramExt("torchd_batch_size{"+l+"}", batchBuckets),
		preprocess:    m.set.GetOrCreatePrometheusHistogramExt("torchd_preprocess_seconds{"+l+"}", secondBuckets),
		postprocess:   m.set.GetOrCreatePrometheusHistogramExt("torchd_postprocess_seconds{"+l+"}", secondBuckets),
		tsRequests:    m.set.GetOrCreateCounter("ts_inference_requests_total{" + ts + "}"),
		tsLatencyUS:   m.set.GetOrCreateFloatCounter("ts_inference_latency_microseconds{" + ts + "}"),
		tsQueueUS:     m.set.GetOrCreateFloatCounter("ts_queue_latency_microseconds{" + ts + "}"),
	}
	m.set.GetOrCreateGauge("torchd_queue_depth{"+l+"}", func() float64 { return float64(b.Pending()) })
	m.set.GetOrCreateGauge("torchd_batch_size_limit{"+l+"}", func() float64 { return float64(b.batchSize.Load()) })
	m.set.GetOrCreateGauge("torchd_batch_delay_seconds{"+l+"}", func() float64 { return time.Duration(b.maxDelay.Load()).Seconds() })
	m.set.GetOrCreateGauge("torchd_workers{"+l+"}", func() float64 { return float64(mm.workers.Load()) })
	m.set.GetOrCreateGauge("torchd_stuck_workers{"+l+"}", func() float64 { return float64(mm.stuck.Load()) })
	m.models[key] = mm
	return mm
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
		c, _ = mm.codes.LoadOrStore(code, mm.set.GetOrCreateCounter("torchd_requests_total{"+mm.labels+`,code="`+strconv.Itoa(code)+`"}`))
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
