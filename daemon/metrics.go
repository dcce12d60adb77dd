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
}

func newMetrics() *Metrics {
	h, _ := os.Hostname()
	return &Metrics{set: metrics.NewSet(), hostname: h, models: map[string]*modelMetrics{}}
}

// modelMetrics are one model version's series. Updating them costs a few atomic adds.
type modelMetrics struct {
	set           *metrics.Set
	labels        string
	queueTime     *metrics.Histogram
	inferenceTime *metrics.Histogram
	latency       *metrics.Histogram
	batchSize     *metrics.Histogram
	preprocess    *metrics.Histogram
	postprocess   *metrics.Histogram
	// TorchServe's names, so that existing dashboards keep working.
	tsRequests  *metrics.Counter
	tsLatencyUS *metrics.FloatCounter
	tsQueueUS   *metrics.FloatCounter

	workers atomic.Int64
	codes   sync.Map // status code → *metrics.Counter
}

func (m *Metrics) model(name, version string, pending func() int) *modelMetrics {
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
		queueTime:     m.set.GetOrCreateHistogram("torchd_queue_seconds{" + l + "}"),
		inferenceTime: m.set.GetOrCreateHistogram("torchd_inference_seconds{" + l + "}"),
		latency:       m.set.GetOrCreateHistogram("torchd_request_seconds{" + l + "}"),
		batchSize:     m.set.GetOrCreateHistogram("torchd_batch_size{" + l + "}"),
		preprocess:    m.set.GetOrCreateHistogram("torchd_preprocess_seconds{" + l + "}"),
		postprocess:   m.set.GetOrCreateHistogram("torchd_postprocess_seconds{" + l + "}"),
		tsRequests:    m.set.GetOrCreateCounter("ts_inference_requests_total{" + ts + "}"),
		tsLatencyUS:   m.set.GetOrCreateFloatCounter("ts_inference_latency_microseconds{" + ts + "}"),
		tsQueueUS:     m.set.GetOrCreateFloatCounter("ts_queue_latency_microseconds{" + ts + "}"),
	}
	m.set.GetOrCreateGauge("torchd_queue_depth{"+l+"}", func() float64 { return float64(pending()) })
	m.set.GetOrCreateGauge("torchd_workers{"+l+"}", func() float64 { return float64(mm.workers.Load()) })
	m.models[key] = mm
	return mm
}

func (mm *modelMetrics) observeBatch(size int, d time.Duration) {
	mm.batchSize.Update(float64(size))
	mm.inferenceTime.Update(d.Seconds())
}

func (mm *modelMetrics) observeRequest(code int, total, queued time.Duration) {
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
}
