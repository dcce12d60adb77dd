package handlerproc

import (
	"reflect"
	"testing"
)

func TestParseMetric(t *testing.T) {
	cases := []struct {
		line string
		want Metric
		ok   bool
	}{
		{"[METRICS]DigitBatch.count:4|#ModelName:mnist,Level:Model|#type:GAUGE|#hostname:h1,1733400000,req-1",
			Metric{Name: "DigitBatch", Unit: "count", Type: "GAUGE", Value: 4, Host: "h1", Dims: []Dim{{"ModelName", "mnist"}, {"Level", "Model"}}}, true},
		// Logging's prefix before the marker, no dimensions, no request id.
		{"2026-12-06 INFO [METRICS]Requests.count:1.5|#|#type:COUNTER|#hostname:h2,1733400000",
			Metric{Name: "Requests", Unit: "count", Type: "COUNTER", Value: 1.5, Host: "h2"}, true},
		// ts.metrics.Metric's form has no type.
		{"[METRICS]HandlerTime.ms:2.25|#ModelName:m,Level:Model|#hostname:h3,1733400000,r",
			Metric{Name: "HandlerTime", Unit: "ms", Value: 2.25, Host: "h3", Dims: []Dim{{"ModelName", "m"}, {"Level", "Model"}}}, true},
		{"[METRICS]Failed to update metric with name:X", Metric{}, false},
		{"[METRICS]X.ms:notanumber|#|#hostname:h,1", Metric{}, false},
		{"no marker", Metric{}, false},
	}
	for _, c := range cases {
		got, ok := parseMetric(c.line)
		if ok != c.ok || ok && !reflect.DeepEqual(got, c.want) {
			t.Errorf("%q: %+v %v, want %+v %v", c.line, got, ok, c.want, c.ok)
		}
	}
}
