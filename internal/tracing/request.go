package tracing

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/torchd/torchd/core"
)

// HeaderTraceResponse is the response header that carries a traced request's trace id and
// span: W3C Trace Context Level 2's traceresponse, version-traceid-spanid-flags.
const HeaderTraceResponse = "traceresponse"

// Request is one traced inference request: its server span, in the context the caller
// propagated, and the spans of its stages under it. It implements core.Trace. A request the
// sampler left out is not recording: it still has the trace id (for the logs and the
// response header), and its stages record nothing.
type Request struct {
	t      *Tracer
	ctx    context.Context // holds span, the parent of the stages
	span   trace.Span
	record bool
	grpc   bool
	err    error // the latest stage's failure, for the request's status
}

// Protocol is what a front-end tells about a request when it starts its span.
type Protocol struct {
	Name   string // the span's name: the HTTP method and route, or the gRPC method
	API    string // torchd.api: torchserve, kserve_v1, kserve_v2, openai; oip or torchserve over gRPC
	GRPC   bool
	Method string // the HTTP method; "" for gRPC
	Path   string // the HTTP request's path, or the full gRPC method
}

// Start starts a request's span at arrived, as a child of the context carrier propagates (a
// new trace without one). A nil Tracer returns nil.
func (t *Tracer) Start(carrier propagation.TextMapCarrier, p Protocol, arrived time.Time) *Request {
	if t == nil {
		return nil
	}
	parent := t.prop.Extract(context.Background(), carrier)
	attrs := make([]attribute.KeyValue, 0, 4)
	attrs = append(attrs, attribute.String("torchd.api", p.API))
	if p.GRPC {
		attrs = append(attrs, attribute.String("rpc.system", "grpc"), attribute.String("rpc.method", p.Path))
	} else {
		attrs = append(attrs, attribute.String("http.request.method", p.Method), attribute.String("url.path", p.Path))
	}
	ctx, span := t.tracer.Start(parent, p.Name, trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(arrived), trace.WithAttributes(attrs...))
	return &Request{t: t, ctx: ctx, span: span, record: span.IsRecording(), grpc: p.GRPC}
}

// Model records the model version that serves the request.
func (r *Request) Model(name, version string) {
	if r != nil && r.record {
		r.span.SetAttributes(attribute.String("torchd.model", name), attribute.String("torchd.model.version", version))
	}
}

// TraceID is the request's trace id in hex.
func (r *Request) TraceID() string { return r.span.SpanContext().TraceID().String() }

// Response is the traceresponse header's value: the request span's id, so that a client
// finds its request in the trace, and whether it was sampled.
func (r *Request) Response() string {
	sc := r.span.SpanContext()
	return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-" + sc.TraceFlags().String()
}

// EndHTTP ends the span of a REST request answered with status. A 5xx is a failure of the
// server's (OpenTelemetry's HTTP conventions leave a 4xx a client's, the span unset).
func (r *Request) EndHTTP(status int) {
	if !r.record {
		r.span.End()
		return
	}
	r.span.SetAttributes(attribute.Int("http.response.status_code", status))
	r.end(status >= 500, status >= 400, strconv.Itoa(status), http.StatusText(status))
}

// EndGRPC ends the span of a gRPC call answered with code (its number); serverFault says the
// code is a failure of the server's (INTERNAL, UNAVAILABLE, DEADLINE_EXCEEDED, ...).
func (r *Request) EndGRPC(code int, name string, serverFault bool, msg string) {
	if !r.record {
		r.span.End()
		return
	}
	r.span.SetAttributes(attribute.Int("rpc.grpc.status_code", code))
	r.end(serverFault, code != 0, name, msg)
}

func (r *Request) end(fault, failed bool, code, msg string) {
	if failed {
		typ := code
		if r.err != nil {
			typ = kindOf(r.err)
			msg = r.err.Error()
		}
		r.span.SetAttributes(attribute.String("error.type", typ))
	}
	if fault {
		r.span.SetStatus(codes.Error, msg)
	}
	r.span.End()
}

// Stage records a stage of the request as a child span (core.Trace).
func (r *Request) Stage(name string, start, end time.Time, err error) {
	if !r.record {
		return
	}
	_, s := r.t.tracer.Start(r.ctx, name, trace.WithTimestamp(start))
	if err != nil {
		r.err = err
		s.SetAttributes(attribute.String("error.type", kindOf(err)))
		s.SetStatus(codes.Error, err.Error())
	}
	s.End(trace.WithTimestamp(end))
}

// Fail records the core's error that answered the request (core.Trace): the request span's
// error.type and, for a failure of the server's, its status message.
func (r *Request) Fail(err error) {
	if r.record {
		r.err = err
	}
}

// Batch opens a batch's span (core.Trace): a root span of its own trace, since a batch
// belongs to no one request, that links to every sampled member's request span; each of
// those links back to it. Sampled members make it sampled (see linked).
func (r *Request) Batch(b core.BatchInfo, members []core.Trace) core.BatchTrace {
	reqs := make([]*Request, 0, len(members))
	links := make([]trace.Link, 0, len(members))
	for _, m := range members {
		if mr, ok := m.(*Request); ok && mr.record {
			reqs = append(reqs, mr)
			links = append(links, trace.Link{SpanContext: mr.span.SpanContext()})
		}
	}
	if len(reqs) == 0 {
		return nil
	}
	ctx, span := r.t.tracer.Start(context.Background(), "batch", trace.WithNewRoot(), trace.WithLinks(links...), trace.WithTimestamp(b.Dispatched),
		trace.WithAttributes(attribute.String("torchd.model", b.Model), attribute.String("torchd.model.version", b.Version),
			attribute.String("torchd.device", b.Device), attribute.String("torchd.backend", b.Backend), attribute.Int("torchd.batch.size", b.Size), attribute.Int("torchd.batch.traced", len(reqs))))
	back := trace.Link{SpanContext: span.SpanContext()}
	for _, m := range reqs {
		m.span.AddLink(back)
		m.span.SetAttributes(attribute.Int("torchd.batch.size", b.Size))
	}
	return &batch{t: r.t, ctx: ctx, span: span}
}

// batch is an open batch span.
type batch struct {
	t    *Tracer
	ctx  context.Context
	span trace.Span
}

// Forward records a forward under the batch span.
func (b *batch) Forward(start, end time.Time, err error) {
	_, s := b.t.tracer.Start(b.ctx, "forward", trace.WithTimestamp(start))
	if err != nil {
		s.SetStatus(codes.Error, err.Error())
	}
	s.End(trace.WithTimestamp(end))
}

// End ends the batch span.
func (b *batch) End(end time.Time, err error) {
	if err != nil {
		b.span.SetStatus(codes.Error, err.Error())
	}
	b.span.End(trace.WithTimestamp(end))
}

// kindOf names a core error's kind for error.type.
func kindOf(err error) string {
	for _, k := range []struct {
		err  error
		name string
	}{
		{core.ErrDeadline, "deadline"}, {core.ErrQueueFull, "queue_full"}, {core.ErrClientGone, "client_gone"},
		{core.ErrBadInput, "bad_input"}, {core.ErrNoWorker, "no_worker"}, {core.ErrUnregistered, "unregistered"},
		{core.ErrInference, "inference"}, {core.ErrModelNotFound, "model_not_found"}, {core.ErrVersionNotFound, "version_not_found"},
	} {
		if errors.Is(err, k.err) {
			return k.name
		}
	}
	return "error"
}
