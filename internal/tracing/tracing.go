// Package tracing traces inference requests with OpenTelemetry: it builds the SDK's tracer
// provider, sampler, propagators and exporter from torchd's tracing settings, starts a
// request's span in the context its caller propagated, and records the spans of the request
// path (core.Trace) and of the batches requests ride in.
//
// It knows no protocol's codec: a front-end hands it a carrier over its own headers or
// metadata, and the status it answered. Off, there is no Tracer (nil), and the request path
// makes no call into it.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"

	"go.opentelemetry.io/contrib/propagators/b3"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Config is tracing's part of torchd's configuration (daemon/config.go's trace_* settings,
// which read the standard OTEL_* variables). Every field is text as given: New checks it,
// and a value it cannot use is a warning, never a failed start.
type Config struct {
	Exporter    string // none (default: tracing off), otlp or console
	Endpoint    string // the OTLP traces endpoint URL; "": the exporter's own (OTEL_EXPORTER_OTLP_ENDPOINT, else localhost)
	Protocol    string // OTLP over grpc or http/protobuf
	Sampler     string // OTEL_TRACES_SAMPLER's values
	SamplerArg  string // the ratio of the traceidratio samplers
	ServiceName string
	Propagators string // comma-separated: tracecontext, baggage, b3, b3multi, none
	Version     string // torchd's, for service.version
}

// Tracer starts traced requests. A nil *Tracer is tracing off.
type Tracer struct {
	provider *sdktrace.TracerProvider
	tracer   trace.Tracer
	prop     propagation.TextMapPropagator
}

// New returns the tracer that cfg describes, or nil when tracing is off. What it cannot use
// it logs as a warning: an unknown exporter or endpoint turns tracing off, an unknown sampler
// or propagator falls back to the default.
func New(cfg Config, log *slog.Logger) *Tracer {
	exp := strings.ToLower(strings.TrimSpace(cfg.Exporter))
	switch exp {
	case "", "none":
		return nil
	case "otlp", "console":
	default:
		log.Warn("tracing off: trace_exporter (OTEL_TRACES_EXPORTER) must be otlp, console or none", "got", cfg.Exporter)
		return nil
	}
	exporter, err := newExporter(exp, cfg, log)
	if err != nil {
		log.Warn("tracing off: "+err.Error(), "exporter", exp)
		return nil
	}
	sampler, err := newSampler(cfg.Sampler, cfg.SamplerArg)
	if err != nil {
		log.Warn("trace sampler: "+err.Error()+"; using parentbased_always_on", "sampler", cfg.Sampler, "arg", cfg.SamplerArg)
		sampler = sdktrace.ParentBased(sdktrace.AlwaysSample())
	}
	prop, unknown := newPropagator(cfg.Propagators)
	if len(unknown) > 0 {
		log.Warn("trace_propagators (OTEL_PROPAGATORS): unknown propagators left out; known: tracecontext, baggage, b3, b3multi, none", "unknown", strings.Join(unknown, ","))
	}
	name := strings.TrimSpace(cfg.ServiceName)
	if name == "" {
		name = "torchd"
	}
	// OTEL_RESOURCE_ATTRIBUTES adds to the resource; service.name is the setting's, which the
	// configuration's precedence chose (the later resource of a merge wins).
	res := resource.Default()
	if env, err := resource.New(context.Background(), resource.WithFromEnv()); err == nil {
		if merged, err := resource.Merge(res, env); err == nil {
			res = merged
		}
	} else {
		log.Warn("OTEL_RESOURCE_ATTRIBUTES not used: " + err.Error())
	}
	own := resource.NewSchemaless(attribute.String("service.name", name), attribute.String("service.version", cfg.Version))
	if merged, err := resource.Merge(res, own); err == nil {
		res = merged
	} else {
		res = own
	}
	// The exporter's failures (an unreachable collector) are logged, never the request's.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("trace export", "err", err) }))
	log.Info("tracing on", "exporter", exp, "endpoint", endpointForLog(exp, cfg), "sampler", sampler.Description(), "propagators", cfg.Propagators, "service", name)
	return newTracer(sdktrace.NewBatchSpanProcessor(exporter, batchOptions(log)...), sampler, prop, res, sdktrace.WithRawSpanLimits(spanLimits(log)))
}

// newTracer is a tracer whose spans go to sp: the exporter's batching queue, which never
// blocks a request (a full queue drops spans), or a test's recorder.
func newTracer(sp sdktrace.SpanProcessor, sampler sdktrace.Sampler, prop propagation.TextMapPropagator, res *resource.Resource, opts ...sdktrace.TracerProviderOption) *Tracer {
	tp := sdktrace.NewTracerProvider(append([]sdktrace.TracerProviderOption{sdktrace.WithSpanProcessor(sp), sdktrace.WithSampler(linked{sampler}), sdktrace.WithResource(res)}, opts...)...)
	return &Tracer{provider: tp, tracer: tp.Tracer("github.com/torchd/torchd"), prop: prop}
}

// Shutdown exports the spans still buffered and stops the exporter; ctx bounds the wait.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.provider.Shutdown(ctx)
}

func newExporter(kind string, cfg Config, log *slog.Logger) (sdktrace.SpanExporter, error) {
	if kind == "console" {
		return stdouttrace.New(stdouttrace.WithWriter(os.Stdout))
	}
	proto := strings.ToLower(strings.TrimSpace(cfg.Protocol))
	ep := strings.TrimSpace(cfg.Endpoint)
	if ep != "" {
		u, err := url.Parse(ep)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("trace_endpoint (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) must be a URL like http://collector:4318/v1/traces, got %q", ep)
		}
	}
	ctx := context.Background()
	switch proto {
	case "grpc":
		opts := []otlptracegrpc.Option{otlptracegrpc.WithTimeout(exporterTimeout(log))}
		if ep != "" {
			opts = append(opts, otlptracegrpc.WithEndpointURL(ep))
		}
		return otlptracegrpc.New(ctx, opts...)
	case "", "http/protobuf":
		opts := []otlptracehttp.Option{otlptracehttp.WithTimeout(exporterTimeout(log))}
		if ep != "" {
			opts = append(opts, otlptracehttp.WithEndpointURL(ep))
		}
		return otlptracehttp.New(ctx, opts...)
	}
	return nil, fmt.Errorf("trace_protocol (OTEL_EXPORTER_OTLP_TRACES_PROTOCOL) must be grpc or http/protobuf, got %q", cfg.Protocol)
}

func endpointForLog(kind string, cfg Config) string {
	switch {
	case kind == "console":
		return "stdout"
	case cfg.Endpoint != "":
		return cfg.Endpoint
	}
	return "the exporter's default"
}

// newSampler reads OTEL_TRACES_SAMPLER's names; arg is the ratio of the traceidratio ones.
func newSampler(name, arg string) (sdktrace.Sampler, error) {
	ratio := 1.0
	if a := strings.TrimSpace(arg); a != "" {
		r, err := strconv.ParseFloat(a, 64)
		if err != nil || r < 0 || r > 1 {
			return nil, fmt.Errorf("trace_sampler_arg (OTEL_TRACES_SAMPLER_ARG) must be a ratio in [0, 1], got %q", arg)
		}
		ratio = r
	}
	switch strings.ToLower(strings.TrimSpace(name)) {
	case "always_on":
		return sdktrace.AlwaysSample(), nil
	case "always_off":
		return sdktrace.NeverSample(), nil
	case "traceidratio":
		return sdktrace.TraceIDRatioBased(ratio), nil
	case "parentbased_always_on":
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), nil
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), nil
	case "", "parentbased_traceidratio":
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio)), nil
	}
	return nil, errors.New("trace_sampler (OTEL_TRACES_SAMPLER) must be always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio")
}

// newPropagator reads OTEL_PROPAGATORS's names; it returns the names it does not know.
func newPropagator(list string) (propagation.TextMapPropagator, []string) {
	var props []propagation.TextMapPropagator
	var unknown []string
	for _, n := range strings.Split(list, ",") {
		switch n = strings.ToLower(strings.TrimSpace(n)); n {
		case "":
		case "tracecontext":
			props = append(props, propagation.TraceContext{})
		case "baggage":
			props = append(props, propagation.Baggage{})
		case "b3":
			props = append(props, b3.New(b3.WithInjectEncoding(b3.B3SingleHeader)))
		case "b3multi":
			props = append(props, b3.New(b3.WithInjectEncoding(b3.B3MultipleHeader)))
		case "none":
			return propagation.NewCompositeTextMapPropagator(), unknown
		default:
			unknown = append(unknown, n)
		}
	}
	return propagation.NewCompositeTextMapPropagator(props...), unknown
}

// linked samples a new root span that links to a sampled span, as a batch span does when
// one of its requests is sampled; every other span is base's to decide.
type linked struct{ base sdktrace.Sampler }

func (l linked) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	if !trace.SpanContextFromContext(p.ParentContext).IsValid() {
		for _, k := range p.Links {
			if k.SpanContext.IsSampled() {
				return sdktrace.SamplingResult{Decision: sdktrace.RecordAndSample}
			}
		}
	}
	return l.base.ShouldSample(p)
}

func (l linked) Description() string { return l.base.Description() }
