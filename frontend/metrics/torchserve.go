package metrics

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	vm "github.com/VictoriaMetrics/metrics"
)

// tsRequestSeries are TorchServe's per-request series of one model_version label.
type tsRequestSeries struct {
	requests           *vm.Counter
	latencyUS, queueUS *vm.FloatCounter
}

// tsRequestNames are the series' names, in the order newTSRequestSeries makes them.
func tsRequestNames(model, version, host string) [3]string {
	l := fmt.Sprintf(`{model_name=%q,model_version=%q,hostname=%q}`, model, version, host)
	return [3]string{"ts_inference_requests_total" + l, "ts_inference_latency_microseconds" + l, "ts_queue_latency_microseconds" + l}
}

// newTSRequestSeries gets or makes the series; track records each name for the version's drop.
func newTSRequestSeries(set *vm.Set, model, version, host string, track func(string) string) tsRequestSeries {
	n := tsRequestNames(model, version, host)
	return tsRequestSeries{
		requests:  set.GetOrCreateCounter(track(n[0])),
		latencyUS: set.GetOrCreateFloatCounter(track(n[1])),
		queueUS:   set.GetOrCreateFloatCounter(track(n[2])),
	}
}

func (s tsRequestSeries) add(total, queued time.Duration, log *tsLogger, dims string) {
	s.requests.Inc()
	s.latencyUS.Add(float64(total.Microseconds()))
	s.queueUS.Add(float64(queued.Microseconds()))
	log.write("ts_inference_requests_total", "Count", 1, dims)
	log.write("ts_inference_latency_microseconds", "Microseconds", float64(total.Microseconds()), dims)
	log.write("ts_queue_latency_microseconds", "Microseconds", float64(queued.Microseconds()), dims)
}

// tsSeriesNames are the series TorchServe's frontend writes from its default metrics.yaml.
var tsSeriesNames = map[string]bool{
	"Requests2XX": true, "Requests4XX": true, "Requests5XX": true,
	"ts_inference_requests_total": true, "ts_inference_latency_microseconds": true, "ts_queue_latency_microseconds": true,
	"QueueTime": true, "WorkerThreadTime": true, "WorkerLoadTime": true,
	"CPUUtilization": true, "MemoryUsed": true, "MemoryAvailable": true, "MemoryUtilization": true,
	"DiskUsage": true, "DiskUtilization": true, "DiskAvailable": true,
	"HandlerTime": true, "PredictionTime": true,
}

// writeTorchServeText copies Prometheus text to w, with TorchServe's series written as its
// Java Prometheus client writes them: a comma after the last label and a value with a
// decimal point, `Requests2XX{Level="Host",Hostname="h",} 4.0`. TorchServe's own tests, and
// scrapers written against TorchServe, match those lines as text; Prometheus parses both
// forms alike. Every other line passes unchanged.
func writeTorchServeText(w io.Writer, text []byte) {
	out := make([]byte, 0, len(text)+256)
	for len(text) > 0 {
		line := text
		if i := bytes.IndexByte(text, '\n'); i >= 0 {
			line, text = text[:i+1], text[i+1:]
		} else {
			text = nil
		}
		out = append(out, tsLine(line)...)
	}
	w.Write(out)
}

// tsLine rewrites one series line of a TorchServe metric; others are returned as they are.
func tsLine(line []byte) []byte {
	open := bytes.IndexByte(line, '{')
	if open <= 0 || line[0] == '#' || !tsSeriesNames[string(line[:open])] {
		return line
	}
	end := bytes.LastIndex(line, []byte("} "))
	if end < 0 {
		return line
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(string(line[end+2:])), 64)
	if err != nil {
		return line
	}
	out := make([]byte, 0, len(line)+4)
	out = append(out, line[:end]...)
	if line[end-1] != ',' && line[end-1] != '{' {
		out = append(out, ',')
	}
	out = append(out, "} "...)
	out = append(out, javaDouble(v)...)
	return append(out, '\n')
}

// javaDouble formats v as Java's Double.toString does: 4.0, 0.25, 1.2345678E7.
func javaDouble(v float64) string {
	switch {
	case math.IsNaN(v):
		return "NaN"
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	}
	if a := math.Abs(v); a == 0 || (a >= 1e-3 && a < 1e7) {
		s := strconv.FormatFloat(v, 'f', -1, 64)
		if !strings.Contains(s, ".") {
			s += ".0"
		}
		return s
	}
	s := strconv.FormatFloat(v, 'E', -1, 64) // 1.2345678E+07
	mant, exp, _ := strings.Cut(s, "E")
	if !strings.Contains(mant, ".") {
		mant += ".0"
	}
	e, _ := strconv.Atoi(exp)
	return mant + "E" + strconv.Itoa(e)
}

// tsLogger writes TorchServe's frontend metrics as its metrics_mode=log does: one line per
// update, `2024-05-01T12:00:00,123 - Requests2XX.Count:1.0|#Level:Host|#hostname:h,timestamp:1714564800`,
// as TorchServe's log4j2 writes its TS_METRICS logger to ts_metrics.log. Counters log their
// increment and gauges their value, as TorchServe's LogMetric does. A nil *tsLogger writes
// nothing.
type tsLogger struct {
	mu   sync.Mutex
	w    io.Writer
	host string
	buf  []byte
}

func (l *tsLogger) write(name, unit string, v float64, dims string) {
	if l == nil {
		return
	}
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	b := now.AppendFormat(l.buf[:0], "2006-01-02T15:04:05,000")
	b = append(b, " - "...)
	b = append(b, name...)
	b = append(b, '.')
	b = append(b, unit...)
	b = append(b, ':')
	b = append(b, javaDouble(v)...)
	b = append(b, "|#"...)
	b = append(b, dims...)
	b = append(b, "|#hostname:"...)
	b = append(b, l.host...)
	b = append(b, ",timestamp:"...)
	b = strconv.AppendInt(b, now.Unix(), 10)
	b = append(b, '\n')
	l.buf = b
	l.w.Write(b) // a full disk loses metric lines, not requests
}
