package tracing

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/torchd/torchd/core"
)

// recorded returns a tracer whose spans a recorder keeps, with the given sampler and
// propagators (as trace_sampler and trace_propagators name them).
func recorded(t *testing.T, sampler, arg, props string) (*Tracer, *tracetest.SpanRecorder) {
	t.Helper()
	s, err := newSampler(sampler, arg)
	if err != nil {
		t.Fatal(err)
	}
	p, unknown := newPropagator(props)
	if len(unknown) > 0 {
		t.Fatalf("unknown propagators %v", unknown)
	}
	sr := tracetest.NewSpanRecorder()
	return newTracer(sr, s, p, resource.Empty()), sr
}

func byName(spans []sdktrace.ReadOnlySpan, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

func attr(s sdktrace.ReadOnlySpan, key string) (attribute.Value, bool) {
	for _, a := range s.Attributes() {
		if string(a.Key) == key {
			return a.Value, true
		}
	}
	return attribute.Value{}, false
}

var restPOST = Protocol{Name: "POST /predictions/{model_name}", API: "torchserve", Method: "POST", Path: "/predictions/m"}

// TestPropagationIn: a request joins the trace its caller sent, in each format read.
func TestPropagationIn(t *testing.T) {
	const trace, span = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	for _, c := range []struct {
		name   string
		header map[string]string
	}{
		{"traceparent", map[string]string{"traceparent": "00-" + trace + "-" + span + "-01", "tracestate": "vendor=x"}},
		{"b3 single", map[string]string{"b3": trace + "-" + span + "-1"}},
		{"b3 multi", map[string]string{"x-b3-traceid": trace, "x-b3-spanid": span, "x-b3-sampled": "1"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr, sr := recorded(t, "parentbased_traceidratio", "0", "tracecontext,baggage,b3")
			r := tr.Start(propagation.MapCarrier(c.header), restPOST, time.Now())
			r.EndHTTP(200)
			ended := sr.Ended()
			if len(ended) != 1 {
				t.Fatalf("%d spans, want 1", len(ended))
			}
			s := ended[0]
			if s.SpanContext().TraceID().String() != trace || s.Parent().SpanID().String() != span || !s.Parent().IsRemote() {
				t.Fatalf("span in trace %s under %s, want %s under %s", s.SpanContext().TraceID(), s.Parent().SpanID(), trace, span)
			}
			if r.TraceID() != trace || !strings.HasPrefix(r.Response(), "00-"+trace+"-"+s.SpanContext().SpanID().String()+"-01") {
				t.Fatalf("trace id %s, traceresponse %s", r.TraceID(), r.Response())
			}
			if c.name == "traceparent" && s.SpanContext().TraceState().Get("vendor") != "x" {
				t.Fatalf("tracestate %q not kept", s.SpanContext().TraceState())
			}
		})
	}
}

// TestMalformedContext: a context that cannot be read starts a trace of torchd's own.
func TestMalformedContext(t *testing.T) {
	tr, sr := recorded(t, "parentbased_traceidratio", "1", "tracecontext,baggage,b3")
	for _, h := range []map[string]string{
		{"traceparent": "00-not-a-trace-01"},
		{"traceparent": "00-00000000000000000000000000000000-b7ad6b7169203331-01"},
		{"b3": "garbage"},
		{"x-b3-traceid": "zz", "x-b3-spanid": "1"},
		{"baggage": "%%%"},
	} {
		tr.Start(propagation.MapCarrier(h), restPOST, time.Now()).EndHTTP(200)
	}
	for _, s := range sr.Ended() {
		if s.Parent().IsValid() || !s.SpanContext().TraceID().IsValid() {
			t.Fatalf("span %s under %v: want a new trace", s.SpanContext().TraceID(), s.Parent())
		}
	}
	if n := len(sr.Ended()); n != 5 {
		t.Fatalf("%d spans, want 5", n)
	}
}

// TestSampling: a caller's sampled flag decides; requests without one are traced at the ratio.
func TestSampling(t *testing.T) {
	tr, sr := recorded(t, "parentbased_traceidratio", "0", "tracecontext")
	unsampled := tr.Start(propagation.MapCarrier{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"}, restPOST, time.Now())
	orphan := tr.Start(propagation.MapCarrier{}, restPOST, time.Now())
	for _, r := range []*Request{unsampled, orphan} {
		if r.record || !r.span.SpanContext().TraceID().IsValid() {
			t.Fatalf("recording %v, trace id %s: want not recording, with a trace id for the logs", r.record, r.TraceID())
		}
		r.Stage("queue", time.Now(), time.Now(), nil)
		r.EndHTTP(200)
	}
	if !strings.HasSuffix(unsampled.Response(), "-00") {
		t.Fatalf("traceresponse %s should say unsampled", unsampled.Response())
	}
	if n := len(sr.Ended()); n != 0 {
		t.Fatalf("%d spans recorded, want none", n)
	}
	tr, sr = recorded(t, "parentbased_traceidratio", "1", "tracecontext")
	tr.Start(propagation.MapCarrier{}, restPOST, time.Now()).EndHTTP(200)
	if n := len(sr.Ended()); n != 1 {
		t.Fatalf("ratio 1: %d spans recorded, want 1", n)
	}
}

// TestBatchLinks: a batch's span links to every sampled member's request span, and each of
// those links back to it and names the batch's size.
func TestBatchLinks(t *testing.T) {
	tr, sr := recorded(t, "parentbased_always_on", "", "tracecontext")
	var members []core.Trace
	var reqs []*Request
	for range 3 {
		r := tr.Start(propagation.MapCarrier{}, restPOST, time.Now())
		reqs = append(reqs, r)
		members = append(members, r)
	}
	now := time.Now()
	bt := reqs[1].Batch(core.BatchInfo{Model: "m", Version: "1", Device: "cpu", Backend: "handler_process", Size: 4, Dispatched: now}, members)
	bt.Forward(now, now.Add(time.Millisecond), errors.New("boom"))
	bt.End(now.Add(2*time.Millisecond), errors.New("boom"))
	for _, r := range reqs {
		r.EndHTTP(200)
	}
	spans := sr.Ended()
	batches := byName(spans, "batch")
	if len(batches) != 1 || batches[0].Parent().IsValid() {
		t.Fatalf("%d batch spans, want one, a root", len(batches))
	}
	root := batches[0]
	if v, _ := attr(root, "torchd.batch.size"); v.AsInt64() != 4 {
		t.Fatalf("batch size %v, want 4", v)
	}
	if v, _ := attr(root, "torchd.backend"); v.AsString() != "handler_process" {
		t.Fatalf("backend %v, want handler_process", v)
	}
	if root.Status().Code != codes.Error {
		t.Fatalf("failed batch's status %v", root.Status())
	}
	linked := map[string]bool{}
	for _, l := range root.Links() {
		linked[l.SpanContext.SpanID().String()] = true
	}
	for _, r := range byName(spans, restPOST.Name) {
		if !linked[r.SpanContext().SpanID().String()] {
			t.Errorf("request span %s not linked from the batch", r.SpanContext().SpanID())
		}
		if len(r.Links()) != 1 || r.Links()[0].SpanContext.SpanID() != root.SpanContext().SpanID() {
			t.Errorf("request span %s links %v, want the batch %s", r.SpanContext().SpanID(), r.Links(), root.SpanContext().SpanID())
		}
		if v, _ := attr(r, "torchd.batch.size"); v.AsInt64() != 4 {
			t.Errorf("request span's batch size %v, want 4", v)
		}
	}
	if len(linked) != 3 {
		t.Fatalf("batch links %d spans, want 3", len(linked))
	}
	fw := byName(spans, "forward")
	if len(fw) != 1 || fw[0].Parent().SpanID() != root.SpanContext().SpanID() || fw[0].Status().Code != codes.Error {
		t.Fatalf("forward spans %v", fw)
	}
}

// TestBatchUnsampled: a batch of requests none of which is sampled records nothing.
func TestBatchUnsampled(t *testing.T) {
	tr, sr := recorded(t, "parentbased_traceidratio", "0", "tracecontext")
	r := tr.Start(propagation.MapCarrier{}, restPOST, time.Now())
	if bt := r.Batch(core.BatchInfo{Size: 1, Dispatched: time.Now()}, []core.Trace{r}); bt != nil {
		t.Fatal("a batch of unsampled requests opened a span")
	}
	r.EndHTTP(200)
	if n := len(sr.Ended()); n != 0 {
		t.Fatalf("%d spans", n)
	}
}

// TestStatus: a server's failure (5xx, DEADLINE_EXCEEDED) fails the span with the core's
// message; a client's (4xx) does not, and both name their kind in error.type.
func TestStatus(t *testing.T) {
	tr, sr := recorded(t, "always_on", "", "tracecontext")
	deadline := &core.Error{Kind: core.ErrDeadline, Msg: "model slow did not answer within its timeout"}
	r := tr.Start(propagation.MapCarrier{}, restPOST, time.Now())
	r.Stage("queue", time.Now(), time.Now(), deadline)
	r.Fail(deadline)
	r.EndHTTP(504)
	r = tr.Start(propagation.MapCarrier{}, restPOST, time.Now())
	r.EndHTTP(400)
	r = tr.Start(propagation.MapCarrier{}, Protocol{Name: "inference.GRPCInferenceService/ModelInfer", API: "oip_grpc", GRPC: true, Path: "/inference.GRPCInferenceService/ModelInfer"}, time.Now())
	r.EndGRPC(13, "Internal", true, "negative input")
	spans := sr.Ended()
	want := []struct {
		name   string
		code   codes.Code
		typ    string
		status string
	}{
		{"queue", codes.Error, "deadline", ""},
		{restPOST.Name, codes.Error, "deadline", "http.response.status_code"},
		{restPOST.Name, codes.Unset, "400", "http.response.status_code"},
		{"inference.GRPCInferenceService/ModelInfer", codes.Error, "Internal", "rpc.grpc.status_code"},
	}
	if len(spans) != len(want) {
		t.Fatalf("%d spans, want %d", len(spans), len(want))
	}
	for i, w := range want {
		s := spans[i]
		typ, _ := attr(s, "error.type")
		if s.Name() != w.name || s.Status().Code != w.code || typ.AsString() != w.typ {
			t.Errorf("span %d: %s status %v error.type %q; want %s %v %q", i, s.Name(), s.Status(), typ.AsString(), w.name, w.code, w.typ)
		}
		if _, ok := attr(s, w.status); w.status != "" && !ok {
			t.Errorf("span %d has no %s", i, w.status)
		}
	}
	if msg := spans[1].Status().Description; !strings.Contains(msg, "did not answer") {
		t.Errorf("504's status message %q, want the core's", msg)
	}
}

// TestServiceName: trace_service_name wins over OTEL_SERVICE_NAME as read by the SDK (the
// configuration's precedence chose it), and OTEL_RESOURCE_ATTRIBUTES adds to the resource.
func TestServiceName(t *testing.T) {
	t.Setenv("OTEL_SERVICE_NAME", "from-env")
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test")
	tr := New(Config{Exporter: "console", ServiceName: "from-flag", Version: "1.2.3"}, slog.New(slog.DiscardHandler))
	defer tr.Shutdown(t.Context())
	sr := tracetest.NewSpanRecorder()
	tr.provider.RegisterSpanProcessor(sr)
	tr.Start(propagation.MapCarrier{}, restPOST, time.Now()).EndHTTP(200)
	got := map[string]string{}
	for _, a := range sr.Ended()[0].Resource().Attributes() {
		got[string(a.Key)] = a.Value.Emit()
	}
	if got["service.name"] != "from-flag" || got["service.version"] != "1.2.3" || got["deployment.environment"] != "test" {
		t.Fatalf("resource %v", got)
	}
}

// TestBadConfig: what tracing cannot use is a warning, never a failed start.
func TestBadConfig(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  Config
		on   bool
		warn string
	}{
		{"off by default", Config{}, false, ""},
		{"none", Config{Exporter: "none"}, false, ""},
		{"unknown exporter", Config{Exporter: "jaeger"}, false, "must be otlp, console or none"},
		{"endpoint without scheme", Config{Exporter: "otlp", Endpoint: "collector:4318"}, false, "must be a URL"},
		{"unknown protocol", Config{Exporter: "otlp", Protocol: "thrift"}, false, "must be grpc or http/protobuf"},
		{"unknown sampler", Config{Exporter: "otlp", Protocol: "grpc", Sampler: "sometimes"}, true, "using parentbased_always_on"},
		{"ratio out of range", Config{Exporter: "otlp", Sampler: "traceidratio", SamplerArg: "1.5"}, true, "ratio in [0, 1]"},
		{"unknown propagator", Config{Exporter: "otlp", Propagators: "tracecontext,xray"}, true, "xray"},
		{"console", Config{Exporter: "console"}, true, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			var buf bytes.Buffer
			tr := New(c.cfg, slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn})))
			if (tr != nil) != c.on {
				t.Fatalf("on %v, want %v; log %s", tr != nil, c.on, buf.String())
			}
			defer tr.Shutdown(t.Context())
			if c.warn == "" && buf.Len() > 0 || !strings.Contains(buf.String(), c.warn) {
				t.Fatalf("log %q, want a warning containing %q", buf.String(), c.warn)
			}
		})
	}
}

// TestOTELEnvBounded: the OTEL_* numbers the SDK reads itself are checked as torchd's own
// settings are: one out of range (which panicked, ran out of memory or spun the exporter)
// is a warning that names it, and tracing starts with the default.
func TestOTELEnvBounded(t *testing.T) {
	for _, c := range []struct{ key, value string }{
		{"OTEL_BSP_MAX_QUEUE_SIZE", "-5"},
		{"OTEL_BSP_MAX_QUEUE_SIZE", "2000000000"},
		{"OTEL_BSP_MAX_QUEUE_SIZE", "lots"},
		{"OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "-1"},
		{"OTEL_BSP_SCHEDULE_DELAY", "-100"},
		{"OTEL_BSP_EXPORT_TIMEOUT", "0"},
		{"OTEL_EXPORTER_OTLP_TIMEOUT", "-1"},
		{"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "99999999999999999999"},
		{"OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT", "2000000000"},
		{"OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", "-7"},
		{"OTEL_SPAN_EVENT_COUNT_LIMIT", "-1"},
		{"OTEL_LINK_ATTRIBUTE_COUNT_LIMIT", "1e9"},
	} {
		for _, exp := range []string{"console", "otlp"} {
			if exp == "console" && strings.HasPrefix(c.key, "OTEL_EXPORTER_OTLP") {
				continue // the console exporter has no timeout
			}
			t.Run(c.key+"="+c.value+"/"+exp, func(t *testing.T) {
				t.Setenv(c.key, c.value)
				var buf bytes.Buffer
				tr := New(Config{Exporter: exp, Endpoint: "http://127.0.0.1:1/v1/traces"}, slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn})))
				if tr == nil {
					t.Fatalf("tracing off; log %s", buf.String())
				}
				ctx, cancel := context.WithTimeout(t.Context(), time.Second)
				defer cancel()
				defer tr.Shutdown(ctx)
				if !strings.Contains(buf.String(), c.key+" must be a whole number from") {
					t.Errorf("log %q; want a warning naming %s", buf.String(), c.key)
				}
				tr.Start(propagation.MapCarrier{}, restPOST, time.Now()).EndHTTP(200)
			})
		}
	}
	// A value in range is taken without a word.
	t.Setenv("OTEL_BSP_MAX_QUEUE_SIZE", "100")
	var buf bytes.Buffer
	if n := bspQueueSize.read(slog.New(slog.NewTextHandler(&buf, nil))); n != 100 || buf.Len() > 0 {
		t.Errorf("OTEL_BSP_MAX_QUEUE_SIZE=100 read as %d; log %q", n, buf.String())
	}
}
