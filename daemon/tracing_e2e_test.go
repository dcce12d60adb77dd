package daemon_test

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	pb "github.com/torchd/torchd/proto/inference"
)

// The daemon's access log names a traced request's trace id, REST and gRPC alike: its
// wiring of internal/tracing. What the spans hold, exported over OTLP to a real collector,
// is internal/tracing's TestTracingOTLP and TestTracingOTLPGRPC.
func TestAccessLogTraceID(t *testing.T) {
	t.Setenv("OTEL_TRACES_EXPORTER", "console")
	s := startServer(t, "--models", "slow=slow.mar")
	s.waitHealthy(t)
	const trace = "0000000000000000000000007ace00ff"
	req := must(t, "POST", s.inf+"/predictions/slow", "application/json", []byte(`[[1, 0]]`))
	req.Header.Set("traceparent", "00-"+trace+"-0000000000ca11ff-01")
	if r := send(t, req); r.status != 200 {
		t.Fatalf("predict: %d %s", r.status, r.body)
	}
	grpcTrace := "0000000000000000000000007ace01ff"
	oip := pb.NewGRPCInferenceServiceClient(dial(t, s.grpc))
	if _, err := oip.ModelInfer(metadata.AppendToOutgoingContext(callCtx(t), "traceparent", "00-"+grpcTrace+"-0000000000ca12ff-01"), slowIn(1)); err != nil {
		t.Fatal(err)
	}
	// A call's access line is written once its answer is sent: the client may have it first.
	for _, id := range []string{trace, grpcTrace} {
		waitFor(t, time.Minute, "the access log to name trace "+id, func() bool { return strings.Contains(s.Log(), "trace_id="+id) })
	}
}
