package metrics

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"
)

// Python handlers' own metrics (context.metrics in TorchServe's handlers), served as
// TorchServe's frontend serves them in prometheus mode: the metrics.yaml's model_metrics,
// and with model_metrics_auto_detect any other metric a handler emits, each labelled by its
// dimensions then Hostname, with TorchServe's HELP text and its Java client's number form.
// They are written by hand rather than through the VictoriaMetrics set, whose HELP lines
// cannot carry TorchServe's text.

// HandlerMetricSpec is one metric of a metrics.yaml's model_metrics.
type HandlerMetricSpec struct {
	Name, Unit string
	Type       string // counter, gauge or histogram
	Dimensions []string
}

// ReadTorchServeMetricsConfig reads the model_metrics of a TorchServe metrics.yaml (its
// metrics_config).
func ReadTorchServeMetricsConfig(path string) ([]HandlerMetricSpec, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("metrics_config %s: cannot read it", path)
	}
	type spec struct {
		Name       string   `yaml:"name"`
		Unit       string   `yaml:"unit"`
		Dimensions []string `yaml:"dimensions"`
	}
	var doc struct {
		ModelMetrics struct {
			Counter   []spec `yaml:"counter"`
			Gauge     []spec `yaml:"gauge"`
			Histogram []spec `yaml:"histogram"`
		} `yaml:"model_metrics"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("metrics_config %s: not TorchServe's metrics.yaml: %v", path, err)
	}
	var out []HandlerMetricSpec
	for typ, list := range map[string][]spec{"counter": doc.ModelMetrics.Counter, "gauge": doc.ModelMetrics.Gauge, "histogram": doc.ModelMetrics.Histogram} {
		for _, s := range list {
			if s.Name == "" {
				return nil, fmt.Errorf("metrics_config %s: a model_metrics %s has no name", path, typ)
			}
			out = append(out, HandlerMetricSpec{Name: s.Name, Unit: s.Unit, Type: typ, Dimensions: s.Dimensions})
		}
	}
	slices.SortFunc(out, func(a, b HandlerMetricSpec) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// handlerMetrics are the handlers' metric families, by name.
type handlerMetrics struct {
	mu         sync.Mutex
	families   map[string]*handlerFamily
	autoDetect bool
	series     int // in every family
}

// maxHandlerSeries bounds the series handlers make, all models together: a handler that
// emits a new dimension value per request would otherwise grow the scrape, and torchd's
// memory, without end. Updates of series past it are dropped.
const maxHandlerSeries = 10000

// handlerFamily is one metric: its label names are its dimensions, then Hostname.
type handlerFamily struct {
	typ, unit string
	labels    []string
	series    map[string]*handlerSeries // by label values joined with NUL
	order     []string
}

type handlerSeries struct {
	values []string
	value  float64   // counter: the sum; gauge: the last value; histogram: the sum
	counts []float64 // histogram: per bucket, cumulative when written
	n      float64   // histogram: observations
}

// histogramBuckets are the Prometheus Java client's defaults, which TorchServe's
// histograms use.
var histogramBuckets = []float64{.005, .01, .025, .05, .075, .1, .25, .5, .75, 1, 2.5, 5, 7.5, 10}

// SetHandlerMetrics declares the handlers' metrics (a metrics.yaml's model_metrics), and
// whether a metric it does not declare is added as it first comes (TorchServe's
// model_metrics_auto_detect) or dropped.
func (m *Metrics) SetHandlerMetrics(specs []HandlerMetricSpec, autoDetect bool) {
	m.handler.mu.Lock()
	defer m.handler.mu.Unlock()
	m.handler.autoDetect = autoDetect
	m.handler.families = map[string]*handlerFamily{}
	m.handler.series = 0
	for _, s := range specs {
		m.handler.families[s.Name] = newHandlerFamily(s.Type, s.Unit, s.Dimensions)
	}
}

func newHandlerFamily(typ, unit string, dims []string) *handlerFamily {
	return &handlerFamily{typ: strings.ToLower(typ), unit: unit, labels: append(slices.Clone(dims), "Hostname"), series: map[string]*handlerSeries{}}
}

// HandlerMetric records one update a handler made: name and unit, its type (COUNTER, GAUGE
// or HISTOGRAM), its dimensions' names and values in order, and the host it names. It
// reports false where the update was dropped, as TorchServe drops it: a metric neither
// declared nor auto-detected, dimensions other than the declared ones, a negative counter
// increment, or one of the series torchd writes itself (HandlerTime, PredictionTime, ...);
// and a new series past maxHandlerSeries.
func (m *Metrics) HandlerMetric(name, unit, typ string, dimNames, dimValues []string, host string, value float64) bool {
	if m.off || tsSeriesNames[name] || len(dimNames) != len(dimValues) {
		return false
	}
	h := &m.handler
	h.mu.Lock()
	defer h.mu.Unlock()
	f := h.families[name]
	if f == nil {
		if !h.autoDetect {
			return false
		}
		switch t := strings.ToLower(typ); t {
		case "counter", "gauge", "histogram":
			f = newHandlerFamily(t, unit, dimNames)
		default:
			return false
		}
		if h.families == nil {
			h.families = map[string]*handlerFamily{}
		}
		h.families[name] = f
	}
	values := append(slices.Clone(dimValues), host)
	if len(values) != len(f.labels) || f.typ == "counter" && value < 0 {
		return false
	}
	key := strings.Join(values, "\x00")
	s := f.series[key]
	if s == nil {
		if h.series >= maxHandlerSeries {
			return false
		}
		h.series++
		s = &handlerSeries{values: values}
		if f.typ == "histogram" {
			s.counts = make([]float64, len(histogramBuckets))
		}
		f.series[key] = s
		f.order = append(f.order, key)
	}
	switch f.typ {
	case "counter":
		s.value += value
	case "gauge":
		s.value = value
	case "histogram":
		s.value += value
		s.n++
		for i, le := range histogramBuckets {
			if value <= le {
				s.counts[i]++
			}
		}
	}
	return true
}

// writeHandlerMetrics writes the families in TorchServe's form, sorted by name.
func (m *Metrics) writeHandlerMetrics(w io.Writer) {
	h := &m.handler
	h.mu.Lock()
	defer h.mu.Unlock()
	names := make([]string, 0, len(h.families))
	for n := range h.families {
		names = append(names, n)
	}
	slices.Sort(names)
	var b strings.Builder
	for _, name := range names {
		f := h.families[name]
		fmt.Fprintf(&b, "# HELP %s Torchserve prometheus %s metric with unit: %s\n# TYPE %s %s\n", name, f.typ, f.unit, name, f.typ)
		for _, key := range f.order {
			s := f.series[key]
			if f.typ != "histogram" {
				b.WriteString(name + labelText(f.labels, s.values, "") + " " + javaDouble(s.value) + "\n")
				continue
			}
			for i, le := range histogramBuckets {
				b.WriteString(name + "_bucket" + labelText(f.labels, s.values, javaDouble(le)) + " " + javaDouble(s.counts[i]) + "\n")
			}
			b.WriteString(name + "_bucket" + labelText(f.labels, s.values, "+Inf") + " " + javaDouble(s.n) + "\n")
			b.WriteString(name + "_count" + labelText(f.labels, s.values, "") + " " + javaDouble(s.n) + "\n")
			b.WriteString(name + "_sum" + labelText(f.labels, s.values, "") + " " + javaDouble(s.value) + "\n")
		}
	}
	io.WriteString(w, b.String())
}

// labelText is {A="x",B="y",} as TorchServe's Java client writes labels, with le last
// where given.
func labelText(names, values []string, le string) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, n := range names {
		b.WriteString(n + `="` + escapeLabel(values[i]) + `",`)
	}
	if le != "" {
		b.WriteString(`le="` + le + `",`)
	}
	b.WriteByte('}')
	return b.String()
}

// escapeLabel escapes a label value as the Prometheus text format does.
func escapeLabel(s string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s)
}
