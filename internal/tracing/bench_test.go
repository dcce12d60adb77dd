package tracing

import (
	"io"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/torchd/torchd/core"
)

// BenchmarkRequestSpans is what tracing adds to one request, sampled, on the request path and
// in the export: its span in its caller's context, its three stages, and an eighth of a batch
// of eight (its span and forward), exported over OTLP/HTTP to a server that discards them.
// cpu-ns/op is the process's CPU time (user and system, the discarding server's included) per
// request, which a machine others share disturbs far less than ns/op; compare it with a
// request's own CPU time (docs/guide/tracing.md).
func BenchmarkRequestSpans(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
	}))
	defer srv.Close()
	for _, c := range []struct {
		name, ratio string
		carrier     propagation.MapCarrier
	}{
		{"sampled", "1", propagation.MapCarrier{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}},
		{"unsampled", "0", propagation.MapCarrier{}},
	} {
		b.Run(c.name, func(b *testing.B) {
			exp, err := otlptracehttp.New(b.Context(), otlptracehttp.WithEndpointURL(srv.URL+"/v1/traces"))
			if err != nil {
				b.Fatal(err)
			}
			sampler, _ := newSampler("", c.ratio)
			prop, _ := newPropagator("tracecontext,baggage,b3")
			tr := newTracer(sdktrace.NewBatchSpanProcessor(exp), sampler, prop, resource.Empty())
			b.ReportAllocs()
			cpu0 := cpuTime()
			b.RunParallel(func(pb *testing.PB) {
				var members []core.Trace
				for pb.Next() {
					now := time.Now()
					r := tr.Start(c.carrier, restPOST, now)
					r.Model("digits", "1.0")
					r.Stage("preprocess", now, now, nil)
					r.Stage("queue", now, now, nil)
					members = append(members, r)
					if len(members) == 8 {
						if bt := r.Batch(core.BatchInfo{Model: "digits", Version: "1.0", Device: "cpu", Size: 8, Dispatched: now}, members); bt != nil {
							bt.Forward(now, now, nil)
							bt.End(now, nil)
						}
						members = members[:0]
					}
					r.Stage("postprocess", now, now, nil)
					r.EndHTTP(200)
				}
			})
			tr.Shutdown(b.Context()) // the spans still queued are exported, and counted
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
