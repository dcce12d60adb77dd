package daemon_test

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	tspb "github.com/torchd/torchd/proto/torchserve"
)

// A streaming handler's parts reach the client as they come: over HTTP as chunks, over
// TorchServe's gRPC StreamPredictions as messages. The handler sends its first part, then
// waits until the client has it (the test creates a file) before it sends the last: an
// answer held back until the handler ends would never end.
func TestHandlerProcessStreams(t *testing.T) {
	py := venvPython(t)
	archiveTiny(t, py, "pystream", "handler.py")
	s := startServer(t, "--python", py)
	s.register(t, "url=pystream.mar&initial_workers=1&synchronous=true")
	until := func() (string, []byte) {
		f := filepath.Join(t.TempDir(), "got-first")
		return f, []byte(`{"stream_until":"` + f + `"}`)
	}

	t.Run("http", func(t *testing.T) {
		flag, body := until()
		resp, err := httpClient.Post(s.inf+"/predictions/pystream", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 || !slices.Contains(resp.TransferEncoding, "chunked") {
			t.Fatalf("status %d, transfer encoding %v: want 200, chunked", resp.StatusCode, resp.TransferEncoding)
		}
		r := bufio.NewReader(resp.Body)
		first, err := r.ReadString(';')
		if err != nil || first != "first;" {
			t.Fatalf("first part %q, %v", first, err)
		}
		if err := os.WriteFile(flag, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		rest, err := io.ReadAll(r)
		if err != nil || string(rest) != "last" {
			t.Errorf("after the first part: %q, %v", rest, err)
		}
	})

	t.Run("grpc", func(t *testing.T) {
		flag, body := until()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		c := tspb.NewInferenceAPIsServiceClient(dial(t, s.grpcInf))
		st, err := c.StreamPredictions(ctx, &tspb.PredictionsRequest{ModelName: "pystream", Input: map[string][]byte{"body": body}})
		if err != nil {
			t.Fatal(err)
		}
		m, err := st.Recv()
		if err != nil || string(m.GetPrediction()) != "first;" {
			t.Fatalf("first message %q, %v", m.GetPrediction(), err)
		}
		if err := os.WriteFile(flag, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if m, err = st.Recv(); err != nil || string(m.GetPrediction()) != "last" {
			t.Fatalf("second message %q, %v", m.GetPrediction(), err)
		}
		if _, err := st.Recv(); err != io.EOF {
			t.Errorf("after the last part: %v, want the end of the stream", err)
		}
		// The unary call gets the parts joined.
		if err := os.Remove(flag); err != nil {
			t.Fatal(err)
		}
		go func() { time.Sleep(time.Second); os.WriteFile(flag, nil, 0o644) }()
		r, err := c.Predictions(ctx, &tspb.PredictionsRequest{ModelName: "pystream", Input: map[string][]byte{"body": body}})
		if err != nil || string(r.GetPrediction()) != "first;last" {
			t.Errorf("Predictions: %q, %v", r.GetPrediction(), err)
		}
	})

	// Parts of a batch of one come in order, the last one included.
	r := post(s.inf+"/predictions/pystream", "application/json", []byte(`"stream"`))
	if r.status != 200 || string(r.body) != "abc" {
		t.Errorf("parts a, b, c: %d %q", r.status, r.body)
	}
}
