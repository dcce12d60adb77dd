// Package metrics is torchd's metrics: the core's Recorder over VictoriaMetrics/metrics, with
// torchd's series, TorchServe's (in its names, and in its ts_metrics.log form with
// metrics_mode=log) and Triton's nv_ families, and the metrics port's route that serves them
// in the Prometheus text format.
package metrics

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	vm "github.com/VictoriaMetrics/metrics"
	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/frontend"
	"github.com/valyala/fasthttp"
)

// Metrics are served in the Prometheus text format on the metrics port. They live in one
// vm.Set per server, not in the library's global set, so tests can run several daemons
// in one process.
type Metrics struct {
	set      *vm.Set
	hostname string
	mu       sync.Mutex
	models   map[string]*modelMetrics // by name + "\x00" + version
	// off (enable_metrics_api = false) makes model return nil: a nil *modelMetrics records
	// nothing, so the request path makes no metric updates at all.
	off bool
	ts  tsHostMetrics
	// Statistics returns what Triton's metric families are written from (nil: none).
	Statistics func() []core.Statistics
	handler    handlerMetrics // Python handlers' own (handler.go)
}

// tsHostMetrics are TorchServe's frontend metrics from its default metrics.yaml, with its
// names and labels (Level="Host", Hostname), for the dashboards and alerts that query them.
// Its gauges hold the last value, as TorchServe's do.
type tsHostMetrics struct {
	requests2xx, requests4xx, requests5xx *vm.Counter
	queueTime, workerThreadTime           *vm.Gauge // milliseconds
	// log, with metrics_mode=log, writes them as TorchServe's ts_metrics.log too (nil: not).
	log *tsLogger
}

// Buckets of the histograms: seconds from 100 µs to 30 s, and batch sizes in powers of two.
var (
	secondBuckets = core.LatencyBuckets
	batchBuckets  = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512}
)

func init() {
	// # HELP and # TYPE lines, so that histograms parse as histograms.
	vm.ExposeMetadata(true)
}

func New(enabled bool) *Metrics {
	h, _ := os.Hostname()
	m := &Metrics{set: vm.NewSet(), hostname: h, models: map[string]*modelMetrics{}, off: !enabled}
	host := fmt.Sprintf(`{Level="Host",Hostname=%q}`, h)
	m.ts = tsHostMetrics{
		requests2xx:      m.set.NewCounter("Requests2XX" + host),
		requests4xx:      m.set.NewCounter("Requests4XX" + host),
		requests5xx:      m.set.NewCounter("Requests5XX" + host),
		queueTime:        m.set.NewGauge("QueueTime"+host, nil),
		workerThreadTime: m.set.NewGauge("WorkerThreadTime"+host, nil),
	}
	m.registerHostMetrics()
	return m
}

// CountResponse counts an answer of the inference or management API by its class, as
// TorchServe does for every response it sends: 2xx, 4xx, and anything else as 5xx.
func (m *Metrics) CountResponse(code int) {
	switch {
	case m.off:
	case code >= 200 && code < 300:
		m.ts.requests2xx.Inc()
		m.ts.log.write("Requests2XX", "Count", 1, "Level:Host")
	case code >= 400 && code < 500:
		m.ts.requests4xx.Inc()
		m.ts.log.write("Requests4XX", "Count", 1, "Level:Host")
	default:
		m.ts.requests5xx.Inc()
		m.ts.log.write("Requests5XX", "Count", 1, "Level:Host")
	}
}

// modelMetrics are one model version's series. Updating them costs a few atomic adds.
type modelMetrics struct {
	set           *vm.Set
	name          string
	labels        string
	queueTime     *vm.PrometheusHistogram
	inferenceTime *vm.PrometheusHistogram
	latency       *vm.PrometheusHistogram
	batchSize     *vm.PrometheusHistogram
	preprocess    *vm.PrometheusHistogram
	postprocess   *vm.PrometheusHistogram
	// TorchServe's names, so that existing dashboards keep working: the requests that named
	// this version, and the model's requests that named none, which TorchServe labels
	// model_version="default" (shared by the model's versions).
	tsNamed, tsDefault         tsRequestSeries
	tsNamedDims, tsDefaultDims string // their dimensions in metrics_mode=log
	// TorchServe's model metrics (Level="Model"), last values in milliseconds: the handler's
	// time for a request, and a batch's forward.
	handlerTime, predictionTime *vm.Gauge
	host                        *tsHostMetrics
	workerPrefix, hostname      string // TorchServe's worker names are W-<port>-<model>_<version>

	workers atomic.Int64
	stuck   atomic.Int64
	// batcher is the serving version's: a version reloaded in place (a Triton repository's
	// poll) takes over its predecessor's series, and its queue is the one to report.
	version atomic.Pointer[core.ModelVersion]
	codes   sync.Map // status code → *vm.Counter

	// series are the names of every series above, codes included, so that unregistering
	// the version removes them all: a name that no longer exists keeps no series.
	seriesMu sync.Mutex
	series   []string
	loaded   map[string]int // WorkerLoadTime's series: loaded workers of each name
	dropped  bool
}

// track records a series name for drop.
func (mm *modelMetrics) track(name string) string {
	mm.seriesMu.Lock()
	mm.series = append(mm.series, name)
	mm.seriesMu.Unlock()
	return name
}

func (m *Metrics) Version(v *core.ModelVersion) core.Observer {
	if m.off {
		return (*modelMetrics)(nil)
	}
	name, version := v.Name, v.Version
	m.mu.Lock()
	defer m.mu.Unlock()
	key := name + "\x00" + version
	if mm, ok := m.models[key]; ok {
		mm.version.Store(v)
		return mm
	}
	l := fmt.Sprintf(`model=%q,version=%q`, name, version)
	mm := &modelMetrics{set: m.set, name: name, labels: l, loaded: map[string]int{}, host: &m.ts, workerPrefix: "-" + name + "_" + version, hostname: m.hostname}
	mm.version.Store(v)
	// Versions of a model share these two, as TorchServe's do: they go with the last version.
	mm.handlerTime = m.set.GetOrCreateGauge(handlerTimeName(name, m.hostname), nil)
	mm.predictionTime = m.set.GetOrCreateGauge(predictionTimeName(name, m.hostname), nil)
	hist := func(n string, buckets []float64) *vm.PrometheusHistogram {
		return m.set.GetOrCreatePrometheusHistogramExt(mm.track(n+"{"+l+"}"), buckets)
	}
	mm.queueTime = hist("torchd_queue_seconds", secondBuckets)
	mm.inferenceTime = hist("torchd_inference_seconds", secondBuckets)
	mm.latency = hist("torchd_request_seconds", secondBuckets)
	mm.batchSize = hist("torchd_batch_size", batchBuckets)
	mm.preprocess = hist("torchd_preprocess_seconds", secondBuckets)
	mm.postprocess = hist("torchd_postprocess_seconds", secondBuckets)
	mm.tsNamedDims = "model_name:" + name + ",model_version:" + version
	mm.tsDefaultDims = "model_name:" + name + ",model_version:default"
	mm.tsNamed = newTSRequestSeries(m.set, name, version, m.hostname, mm.track)
	mm.tsDefault = newTSRequestSeries(m.set, name, "default", m.hostname, func(n string) string { return n })
	gauge := func(n string, f func() float64) { m.set.GetOrCreateGauge(mm.track(n+"{"+l+"}"), f) }
	gauge("torchd_queue_depth", func() float64 { return float64(mm.version.Load().Pending()) })
	gauge("torchd_batch_size_limit", func() float64 { return float64(mm.version.Load().Stats().BatchSize) })
	gauge("torchd_batch_delay_seconds", func() float64 { return mm.version.Load().Stats().MaxDelay.Seconds() })
	gauge("torchd_workers", func() float64 { return float64(mm.workers.Load()) })
	gauge("torchd_stuck_workers", func() float64 { return float64(mm.stuck.Load()) })
	if _, ok := v.Model().(core.ProcessReporter); ok {
		gauge("torchd_handler_process_rss_bytes", func() float64 {
			pr, ok := mm.version.Load().Model().(core.ProcessReporter)
			if !ok {
				return 0
			}
			var n int64
			for _, p := range pr.Processes() {
				n += p.RSSBytes
			}
			return float64(n)
		})
		// Lines of the handler's output dropped over its rate, since the version loaded.
		gauge("torchd_handler_log_dropped_lines", func() float64 {
			if ll, ok := mm.version.Load().Model().(core.LogLimiter); ok {
				return float64(ll.DroppedLogLines())
			}
			return 0
		})
	}
	m.models[key] = mm
	return mm
}

// Drop removes a model version's series: it is called when the version is unregistered or
// fails to load. A request still in flight updates its own counters, which are no longer
// written out; Prometheus treats the series as ended.
func (m *Metrics) Drop(name, version string) {
	if m.off {
		return
	}
	m.mu.Lock()
	key := name + "\x00" + version
	mm := m.models[key]
	delete(m.models, key)
	if !m.hasVersions(name) {
		m.set.UnregisterMetric(handlerTimeName(name, m.hostname))
		m.set.UnregisterMetric(predictionTimeName(name, m.hostname))
		for _, n := range tsRequestNames(name, "default", m.hostname) {
			m.set.UnregisterMetric(n)
		}
	}
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

// hasVersions reports whether any version of name still has series; m.mu is held.
func (m *Metrics) hasVersions(name string) bool {
	for _, mm := range m.models {
		if mm.name == name {
			return true
		}
	}
	return false
}

// TorchServe's model-level series, one per model name.
func handlerTimeName(model, host string) string {
	return fmt.Sprintf(`HandlerTime{ModelName=%q,Level="Model",Hostname=%q}`, model, host)
}

func predictionTimeName(model, host string) string {
	return fmt.Sprintf(`PredictionTime{ModelName=%q,Level="Model",Hostname=%q}`, model, host)
}

// The Observer methods do nothing on a nil receiver (metrics off).

func (mm *modelMetrics) Workers(n int) {
	if mm != nil {
		mm.workers.Store(int64(n))
	}
}

func (mm *modelMetrics) Stuck(n int) {
	if mm != nil {
		mm.stuck.Store(int64(n))
	}
}

func (mm *modelMetrics) Preprocess(start time.Time) {
	if mm != nil {
		mm.preprocess.UpdateDuration(start)
	}
}

func (mm *modelMetrics) Postprocess(start time.Time) {
	if mm != nil {
		mm.postprocess.UpdateDuration(start)
	}
}

// Batch records a batch's forward (d) and the rest of the worker's time on it
// (overhead: TorchServe's WorkerThreadTime, the worker's time outside the backend).
func (mm *modelMetrics) Batch(size int, d, overhead time.Duration) {
	if mm == nil {
		return
	}
	mm.batchSize.Update(float64(size))
	mm.inferenceTime.Update(d.Seconds())
	mm.predictionTime.Set(ms(d))
	mm.host.workerThreadTime.Set(ms(overhead))
	mm.host.log.write("WorkerThreadTime", "Milliseconds", ms(overhead), "Level:Host")
}

// Handler records the handler's time for one request: preprocess, its batch's
// forward and postprocess.
func (mm *modelMetrics) Handler(d time.Duration) {
	if mm != nil {
		mm.handlerTime.Set(ms(d))
	}
}

// WorkerLoaded records how long worker id took to load and warm up, as TorchServe's
// WorkerLoadTime{WorkerName="W-9000-digits_1.0"}, until the worker stops.
func (mm *modelMetrics) WorkerLoaded(id int, d time.Duration) {
	if mm == nil {
		return
	}
	name := mm.workerLoadTimeName(id)
	mm.seriesMu.Lock()
	defer mm.seriesMu.Unlock()
	if mm.dropped {
		return
	}
	if mm.loaded[name] == 0 {
		mm.series = append(mm.series, name)
	}
	mm.loaded[name]++
	mm.set.GetOrCreateGauge(name, nil).Set(ms(d))
}

// WorkerStopped removes the worker's WorkerLoadTime: worker ids are not reused, so scaling up
// and down would otherwise leave a series for every worker that ever ran. A version reloaded
// in place numbers its workers afresh, so a name's series goes with the last worker of it.
func (mm *modelMetrics) WorkerStopped(id int) {
	if mm == nil {
		return
	}
	name := mm.workerLoadTimeName(id)
	mm.seriesMu.Lock()
	defer mm.seriesMu.Unlock()
	if mm.dropped || mm.loaded[name] == 0 {
		return
	}
	if mm.loaded[name]--; mm.loaded[name] > 0 {
		return
	}
	delete(mm.loaded, name)
	mm.series = slices.DeleteFunc(mm.series, func(n string) bool { return n == name })
	mm.set.UnregisterMetric(name)
}

func (mm *modelMetrics) workerLoadTimeName(id int) string {
	return fmt.Sprintf(`WorkerLoadTime{WorkerName="W-%d%s",Level="Host",Hostname=%q}`, 9000+id, mm.workerPrefix, mm.hostname)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func (mm *modelMetrics) Request(err error, total, queued time.Duration, named bool) {
	if mm == nil {
		return
	}
	code := frontend.HTTPStatus(err)
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
	c.(*vm.Counter).Inc()
	mm.latency.Update(total.Seconds())
	if named {
		mm.tsNamed.add(total, queued, mm.host.log, mm.tsNamedDims)
	} else {
		mm.tsDefault.add(total, queued, mm.host.log, mm.tsDefaultDims)
	}
	if queued > 0 {
		mm.queueTime.Update(queued.Seconds())
		mm.host.queueTime.Set(ms(queued))
		mm.host.log.write("QueueTime", "Milliseconds", ms(queued), "Level:Host")
	}
}

// WritePrometheus writes every series, then the process metrics (CPU, RSS, goroutines, GC).
func (m *Metrics) WritePrometheus(w io.Writer) {
	var b bytes.Buffer
	m.set.WritePrometheus(&b)
	writeTorchServeText(w, b.Bytes())
	m.writeHandlerMetrics(w)
	if m.Statistics != nil {
		writeTriton(w, m.Statistics())
	}
	vm.WriteProcessMetrics(w)
	vm.WriteFDMetrics(w) // process_open_fds and process_max_fds
}

// LogTorchServe writes TorchServe's frontend metrics to w too, in ts_metrics.log's form
// (metrics_mode=log); with the metrics off it writes nothing.
func (m *Metrics) LogTorchServe(w io.Writer) {
	if !m.off {
		m.ts.log = &tsLogger{w: w, host: m.hostname}
	}
}

// Off reports whether the metrics are off (enable_metrics_api = false).
func (m *Metrics) Off() bool { return m.off }

// Routes are the metrics port's: GET /metrics in the Prometheus text format.
func (m *Metrics) Routes() []*frontend.Route {
	return []*frontend.Route{
		{Method: "GET", Pattern: "/metrics", Summary: "Prometheus text format: torchd's series, TorchServe's, and the process's", Handle: m.serve},
	}
}

func (m *Metrics) serve(ctx *fasthttp.RequestCtx, _ frontend.Params) {
	ctx.SetContentType("text/plain; version=0.0.4; charset=utf-8")
	m.WritePrometheus(ctx)
}
