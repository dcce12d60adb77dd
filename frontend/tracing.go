package frontend

import (
	"context"
	"time"

	"github.com/valyala/fasthttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/internal/tracing"
)

// Tracing's wiring into the front-ends (internal/tracing has the spans): each protocol's
// carrier over its headers, where a request's span starts and ends, and the trace id in the
// access log and the traceresponse header. Only inference requests are traced; health,
// metrics, management and the page are not. With tracing off (a nil *tracing.Tracer) nothing here
// runs on the request path.

// traceKey is the fasthttp user value that holds a REST request's *tracing.Request.
const traceKey = "torchd.trace"

// headerCarrier is a fasthttp request's headers as OpenTelemetry's propagation carrier.
type headerCarrier struct{ h *fasthttp.RequestHeader }

func (c headerCarrier) Get(key string) string { return string(c.h.Peek(key)) }
func (c headerCarrier) Set(key, value string) { c.h.Set(key, value) }
func (c headerCarrier) Keys() []string {
	var keys []string
	for k := range c.h.All() {
		keys = append(keys, string(k))
	}
	return keys
}

// metadataCarrier is a gRPC call's incoming metadata as a propagation carrier; gRPC keeps
// its keys in lower case, as the propagators ask for them.
type metadataCarrier metadata.MD

func (c metadataCarrier) Get(key string) string {
	if v := metadata.MD(c).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}
func (c metadataCarrier) Set(key, value string) { metadata.MD(c).Set(key, value) }
func (c metadataCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// TraceREST starts a REST inference request's trace, when tracing is on, in the context its
// headers carry: c.Trace, the traceresponse header, and the user value that EndTraces and
// the access log read. route names the span ("POST /v2/models/{model_name}/infer").
func TraceREST(t *tracing.Tracer, ctx *fasthttp.RequestCtx, c *core.Call, api, route string) {
	if t == nil {
		return
	}
	method := string(ctx.Method())
	r := t.Start(headerCarrier{&ctx.Request.Header}, tracing.Protocol{Name: method + " " + route, API: api, Method: method, Path: string(ctx.Path())}, time.Now())
	ctx.SetUserValue(traceKey, r)
	ctx.Response.Header.Set(tracing.HeaderTraceResponse, r.Response())
	c.Trace = r
}

// RESTTrace is the REST request's trace, or nil.
func RESTTrace(ctx *fasthttp.RequestCtx) *tracing.Request {
	r, _ := ctx.UserValue(traceKey).(*tracing.Request)
	return r
}

// KeepTrace leaves the REST request's span to the caller, who ends it, rather than to
// EndTraces: a streamed answer's span ends once its last part is written.
func KeepTrace(ctx *fasthttp.RequestCtx) { ctx.SetUserValue(traceKey, nil) }

// EndTraces wraps the inference API: a traced request's span ends with the status it was
// answered with.
func EndTraces(t *tracing.Tracer, h fasthttp.RequestHandler) fasthttp.RequestHandler {
	if t == nil {
		return h
	}
	return func(ctx *fasthttp.RequestCtx) {
		h(ctx)
		if r := RESTTrace(ctx); r != nil {
			r.EndHTTP(ctx.Response.StatusCode())
		}
	}
}

// tracedRPCs are the gRPC methods traced, by their torchd.api. ModelStreamInfer is not: its
// requests share one stream's metadata.
var tracedRPCs = map[string]string{
	"/inference.GRPCInferenceService/ModelInfer":                         "oip_grpc",
	"/org.pytorch.serve.grpc.inference.InferenceAPIsService/Predictions": "torchserve_grpc",
}

type traceCtxKey struct{}

// TraceUnary starts the span of a traced gRPC call in the context its metadata carry,
// sends the traceresponse header, and ends the span with the call's code. It runs first in
// the chain, so the access log sees the trace.
func TraceUnary(t *tracing.Tracer) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		api, ok := tracedRPCs[info.FullMethod]
		if !ok {
			return h(ctx, req)
		}
		md, _ := metadata.FromIncomingContext(ctx)
		r := t.Start(metadataCarrier(md), tracing.Protocol{Name: info.FullMethod[1:], API: api, GRPC: true, Path: info.FullMethod}, time.Now())
		_ = grpc.SetHeader(ctx, metadata.Pairs(tracing.HeaderTraceResponse, r.Response()))
		resp, err := h(context.WithValue(ctx, traceCtxKey{}, r), req)
		st := status.Convert(err)
		r.EndGRPC(int(st.Code()), st.Code().String(), serverFault(st.Code()), st.Message())
		return resp, err
	}
}

// GRPCTrace is the gRPC call's trace, or nil.
func GRPCTrace(ctx context.Context) *tracing.Request {
	r, _ := ctx.Value(traceCtxKey{}).(*tracing.Request)
	return r
}

// serverFault reports the codes that OpenTelemetry's gRPC conventions count as the server's
// failure; the rest are the client's.
func serverFault(c codes.Code) bool {
	switch c {
	case codes.Unknown, codes.DeadlineExceeded, codes.Unimplemented, codes.Internal, codes.Unavailable, codes.DataLoss:
		return true
	}
	return false
}
