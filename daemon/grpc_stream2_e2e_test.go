package daemon_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	tspb "github.com/torchd/torchd/proto/torchserve"
)

// TorchServe's StreamPredictions2: a sequence's requests on one stream, each answered in
// turn with the sequence id, which the handler reads (Context.get_sequence_id); a streaming
// handler's parts are messages of their own. A request that fails (the handler raises, an
// unknown model, no sequence id) answers a message with its status, and the stream goes on.
func TestStreamPredictions2(t *testing.T) {
	py := venvPython(t)
	archiveTiny(t, py, "pyseq", "handler.py")
	s := startServer(t, "--python", py)
	s.register(t, "url=pyseq.mar&initial_workers=1&synchronous=true")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := tspb.NewInferenceAPIsServiceClient(dial(t, s.grpcInf))
	st, err := c.StreamPredictions2(ctx)
	if err != nil {
		t.Fatal(err)
	}
	seq := func(id string) *string { return &id }
	send := func(model, body string, id *string) {
		t.Helper()
		if err := st.Send(&tspb.PredictionsRequest{ModelName: model, SequenceId: id, Input: map[string][]byte{"body": []byte(body)}}); err != nil {
			t.Fatal(err)
		}
	}
	recv := func(what string) *tspb.PredictionResponse {
		t.Helper()
		m, err := st.Recv()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return m
	}

	send("pyseq", `{"x":[1,2,3,4]}`, seq("s1"))
	m := recv("a prediction")
	var a struct{ Logits []float64 }
	if err := json.Unmarshal(m.GetPrediction(), &a); err != nil || len(a.Logits) != 3 || m.GetSequenceId() != "s1" || m.Status != nil {
		t.Errorf("a prediction: %q sequence %q status %v (%v)", m.GetPrediction(), m.GetSequenceId(), m.Status, err)
	}

	send("pyseq", `"sequence"`, seq("s1"))
	if m := recv("the handler's sequence id"); string(m.GetPrediction()) != "sequence s1" {
		t.Errorf("the handler read the sequence id as %q, want s1", m.GetPrediction())
	}

	send("pyseq", `"stream"`, seq("s1"))
	for _, part := range []string{"a", "b", "c"} {
		if m := recv("part " + part); string(m.GetPrediction()) != part || m.GetSequenceId() != "s1" {
			t.Errorf("part %q: %q sequence %q", part, m.GetPrediction(), m.GetSequenceId())
		}
	}

	// Failures answer in the stream, which goes on. A handler that raises is TorchServe's
	// 503, UNAVAILABLE in gRPC.
	send("pyseq", `"raise"`, seq("s1"))
	if m := recv("a handler that raises"); codes.Code(m.GetStatus().GetCode()) != codes.Unavailable || m.GetStatus().GetMessage() != "Prediction failed" || m.GetSequenceId() != "s1" {
		t.Errorf("a handler that raises: status %v sequence %q", m.GetStatus(), m.GetSequenceId())
	}
	send("nosuchmodel", `{"x":[1,2,3,4]}`, seq("s1"))
	if m := recv("an unknown model"); codes.Code(m.GetStatus().GetCode()) != codes.NotFound || !strings.Contains(m.GetStatus().GetMessage(), "nosuchmodel") {
		t.Errorf("an unknown model: status %v", m.GetStatus())
	}
	send("pyseq", `{"x":[1,2,3,4]}`, nil)
	if m := recv("no sequence id"); codes.Code(m.GetStatus().GetCode()) != codes.InvalidArgument || !strings.Contains(m.GetStatus().GetMessage(), "sequenceId is required") {
		t.Errorf("no sequence id: status %v", m.GetStatus())
	}
	send("pyseq", `not json`, seq("s2"))
	if m := recv("a body the handler cannot read"); m.GetStatus().GetCode() == 0 || m.GetSequenceId() != "s2" {
		t.Errorf("a body the handler cannot read: status %v sequence %q", m.GetStatus(), m.GetSequenceId())
	}

	send("pyseq", `{"x":[1,2,3,4]}`, seq("s2"))
	if m := recv("after the failures"); m.Status != nil || m.GetSequenceId() != "s2" || len(m.GetPrediction()) == 0 {
		t.Errorf("after the failures: %q status %v", m.GetPrediction(), m.GetStatus())
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); !errors.Is(err, io.EOF) {
		t.Errorf("after CloseSend: %v, want the end of the stream", err)
	}
}

// A client that leaves a StreamPredictions2 stream mid-answer ends only its stream: the
// server goes on serving the model, on new streams and other calls.
func TestStreamPredictions2ClientCancel(t *testing.T) {
	py := venvPython(t)
	archiveTiny(t, py, "pyseqcancel", "handler.py")
	s := startServer(t, "--python", py)
	s.register(t, "url=pyseqcancel.mar&initial_workers=1&synchronous=true")
	c := tspb.NewInferenceAPIsServiceClient(dial(t, s.grpcInf))

	// The handler sends its first part, then waits for a file that the test writes only
	// after the client has left.
	flag := filepath.Join(t.TempDir(), "got-first")
	ctx, cancel := context.WithCancel(context.Background())
	st, err := c.StreamPredictions2(ctx)
	if err != nil {
		t.Fatal(err)
	}
	id := "s1"
	if err := st.Send(&tspb.PredictionsRequest{ModelName: "pyseqcancel", SequenceId: &id,
		Input: map[string][]byte{"body": []byte(`{"stream_until":"` + flag + `"}`)}}); err != nil {
		t.Fatal(err)
	}
	if m, err := st.Recv(); err != nil || string(m.GetPrediction()) != "first;" {
		t.Fatalf("first part %q, %v", m.GetPrediction(), err)
	}
	cancel()
	if _, err := st.Recv(); status.Code(err) != codes.Canceled {
		t.Errorf("after the client's cancel: %v, want CANCELED", err)
	}
	if err := os.WriteFile(flag, nil, 0o644); err != nil {
		t.Fatal(err)
	}

	ctx2, cancel2 := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel2()
	st2, err := c.StreamPredictions2(ctx2)
	if err != nil {
		t.Fatal(err)
	}
	id = "s2"
	if err := st2.Send(&tspb.PredictionsRequest{ModelName: "pyseqcancel", SequenceId: &id, Input: map[string][]byte{"body": []byte(`"sequence"`)}}); err != nil {
		t.Fatal(err)
	}
	if m, err := st2.Recv(); err != nil || string(m.GetPrediction()) != "sequence s2" {
		t.Errorf("a new stream after the cancel: %q, %v", m.GetPrediction(), err)
	}
	if r, err := c.Predictions(ctx2, &tspb.PredictionsRequest{ModelName: "pyseqcancel", Input: map[string][]byte{"body": []byte(`{"x":[1,2,3,4]}`)}}); err != nil || len(r.GetPrediction()) == 0 {
		t.Errorf("Predictions after the cancel: %q, %v", r.GetPrediction(), err)
	}
}
