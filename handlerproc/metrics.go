package handlerproc

import (
	"regexp"
	"strconv"
	"strings"
)

// Metric is one update a handler made through TorchServe's context.metrics: its worker
// prints it as a [METRICS] line on its output, which torchd reads as TorchServe's frontend
// does, and hands to Config.OnMetric.
type Metric struct {
	Name, Unit string
	// Type is COUNTER, GAUGE or HISTOGRAM; "" where the line gave none (ts.metrics.Metric).
	Type  string
	Value float64
	Dims  []Dim // in the order the handler gave them
	Host  string
}

// Dim is one dimension of a metric: a Prometheus label.
type Dim struct{ Name, Value string }

// metricLine is the line's form, as TorchServe's frontend parses it (Metric.java): name.unit:
// value|#dims|#type:TYPE|#hostname:host,timestamp[,request ids].
var metricLine = regexp.MustCompile(`^\s*([\w\s]+)\.([\w\s]+):([0-9\-,.e]+)\|#([^|]*)(\|#type:([^|,]+))?\|#hostname:([^,]+),([^,]+)(,(.*))?`)

// parseMetric reads the metric of an output line holding [METRICS]; ok is false for any
// other line, and for one that does not parse (TorchServe logs and drops those).
func parseMetric(line string) (m Metric, ok bool) {
	_, rest, found := strings.Cut(line, "[METRICS]")
	if !found {
		return m, false
	}
	g := metricLine.FindStringSubmatch(rest)
	if g == nil {
		return m, false
	}
	v, err := strconv.ParseFloat(g[3], 64)
	if err != nil {
		return m, false
	}
	m = Metric{Name: g[1], Unit: g[2], Value: v, Type: g[6], Host: g[7]}
	if g[4] != "" {
		for _, d := range strings.Split(g[4], ",") {
			name, value, _ := strings.Cut(d, ":")
			m.Dims = append(m.Dims, Dim{Name: name, Value: value})
		}
	}
	return m, true
}
