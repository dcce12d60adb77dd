package served_test

import (
	"archive/zip"
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http" // a real client: a streamed answer's chunks are seen only as they cross a connection
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/torchd/torchd/frontend/frontendtest"
	"github.com/torchd/torchd/handlerproc"
	tspb "github.com/torchd/torchd/proto/torchserve"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A streaming handler's parts reach the client as they come: over HTTP as chunks, over
// TorchServe's gRPC StreamPredictions as messages. The handler sends its first part, then
// waits until the client has it (the test creates a file) before it sends the last: an
// answer held back until the handler ends would never end.
func TestHandlerProcessStreams(t *testing.T) {
	py := venvPython(t)
	s := serve(t, "", &handlerproc.Backend{Python: py})
	archiveTiny(t, py, s.store, "pystream", "handler.py")
	addr, grpcAddr := s.listen(t), s.listenGRPC(t)
	s.register(t, "url=pystream.mar&initial_workers=1&synchronous=true")
	until := func() (string, []byte) {
		f := filepath.Join(t.TempDir(), "got-first")
		return f, []byte(`{"stream_until":"` + f + `"}`)
	}

	t.Run("http", func(t *testing.T) {
		flag, body := until()
		resp, err := http.Post("http://"+addr+"/predictions/pystream", "application/json", bytes.NewReader(body))
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
		c := tspb.NewInferenceAPIsServiceClient(dial(t, grpcAddr))
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
		if err := os.WriteFile(flag, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		r, err := c.Predictions(ctx, &tspb.PredictionsRequest{ModelName: "pystream", Input: map[string][]byte{"body": body}})
		if err != nil || string(r.GetPrediction()) != "first;last" {
			t.Errorf("Predictions: %q, %v", r.GetPrediction(), err)
		}
	})

	// Parts of a batch of one come in order, the last one included.
	r := s.inf("POST", "/predictions/pystream", "application/json", []byte(`"stream"`))
	if r.status != 200 || string(r.body) != "abc" {
		t.Errorf("parts a, b, c: %d %q", r.status, r.body)
	}
}

// TorchServe's StreamPredictions2: a sequence's requests on one stream, each answered in
// turn with the sequence id, which the handler reads (Context.get_sequence_id); a streaming
// handler's parts are messages of their own. A request that fails (the handler raises, an
// unknown model, no sequence id) answers a message with its status, and the stream goes on.
func TestStreamPredictions2(t *testing.T) {
	py := venvPython(t)
	s := serve(t, "", &handlerproc.Backend{Python: py})
	archiveTiny(t, py, s.store, "pyseq", "handler.py")
	s.register(t, "url=pyseq.mar&initial_workers=1&synchronous=true")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := tspb.NewInferenceAPIsServiceClient(dial(t, s.listenGRPC(t)))
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
	s := serve(t, "", &handlerproc.Backend{Python: py})
	archiveTiny(t, py, s.store, "pyseqcancel", "handler.py")
	s.register(t, "url=pyseqcancel.mar&initial_workers=1&synchronous=true")
	c := tspb.NewInferenceAPIsServiceClient(dial(t, s.listenGRPC(t)))

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

// writeProbeWheel writes a pure-Python wheel of one module, tdprobe, into dir: a requirement
// that pip installs without an index.
func writeProbeWheel(t *testing.T, dir string) string {
	t.Helper()
	name := "tdprobe-1.0-py3-none-any.whl"
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	z := zip.NewWriter(f)
	for path, body := range map[string]string{
		"tdprobe/__init__.py":            "VALUE = 'probe-ok'\n",
		"tdprobe-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: tdprobe\nVersion: 1.0\n",
		"tdprobe-1.0.dist-info/WHEEL":    "Wheel-Version: 1.0\nGenerator: torchd-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
		"tdprobe-1.0.dist-info/RECORD":   "tdprobe/__init__.py,,\ntdprobe-1.0.dist-info/METADATA,,\ntdprobe-1.0.dist-info/WHEEL,,\ntdprobe-1.0.dist-info/RECORD,,\n",
	} {
		w, err := z.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(body))
	}
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	return name
}

// archiveWithRequirements packs, with torch-model-archiver, a handler that imports tdprobe and
// a requirements.txt that names tdprobe's wheel, shipped in the archive, into dir as NAME.mar;
// requirements.txt may name another line in place of the wheel.
func archiveWithRequirements(t *testing.T, py, dir, name, requirement string) {
	t.Helper()
	src := t.TempDir()
	wheel := writeProbeWheel(t, src)
	files := map[string]string{
		"req_handler.py":   "import tdprobe\n\n\ndef handle(data, context):\n    if data is None:\n        return None\n    return [{'probe': tdprobe.VALUE}] * len(data)\n",
		"requirements.txt": cmp.Or(requirement, "./"+wheel) + "\n",
		"weights.bin":      "unused",
	}
	for n, b := range files {
		if err := os.WriteFile(filepath.Join(src, n), []byte(b), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(filepath.Join(filepath.Dir(py), "torch-model-archiver"), "--model-name", name, "--version", "1.0",
		"--serialized-file", "weights.bin", "--handler", "req_handler.py", "--requirements-file", "requirements.txt",
		"--extra-files", wheel, "--export-path", dir, "--force")
	cmd.Dir = src
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("torch-model-archiver: %v\n%s", err, out)
	}
}

// An archive's requirements.txt is installed for its handler processes only when
// install_py_dep_per_model allows it; without it, the file is not installed, the log says
// so, and the failed start says why.
func TestRequirementsPerModel(t *testing.T) {
	py := venvPython(t)
	store := t.TempDir()
	archiveWithRequirements(t, py, store, "pyreq", "")
	archiveWithRequirements(t, py, store, "pybadreq", "./missing-1.0-py3-none-any.whl")
	s := serve(t, store, &handlerproc.Backend{Python: py, InstallPyDeps: true})
	s.register(t, "url=pyreq.mar&initial_workers=1&synchronous=true")
	if r := s.inf("POST", "/predictions/pyreq", "application/json", []byte(`{"x":1}`)); r.status != 200 || !strings.Contains(string(r.body), "probe-ok") {
		t.Fatalf("a handler importing its installed requirement: %d %s", r.status, r.body)
	}
	if r := s.inf("POST", "/v1/models/pyreq:predict", "application/json", []byte(`{"instances":[1]}`)); r.status != 200 || !strings.Contains(string(r.body), "probe-ok") {
		t.Fatalf("KServe v1: %d %s", r.status, r.body)
	}
	if !strings.Contains(s.log.String(), "installed the archive's requirements") {
		t.Errorf("the install is not logged:\n%s", s.log.String())
	}
	// A requirement pip cannot install fails the registration with pip's error.
	errorShape(t, s.mgmt("POST", "/models?url=pybadreq.mar&initial_workers=1&synchronous=true"),
		500, "InternalServerException", "pip install -r requirements.txt failed: ERROR:")

	// torchd's default: not installed.
	off := serve(t, store, &handlerproc.Backend{Python: py})
	r := off.mgmt("POST", "/models?url=pyreq.mar&initial_workers=1&synchronous=true")
	if r.status != 500 || !strings.Contains(string(r.body), "ModuleNotFoundError") || !strings.Contains(string(r.body), "requirements.txt was not installed: install_py_dep_per_model is off") {
		t.Errorf("without install_py_dep_per_model: %d %s", r.status, r.body)
	}
	if !strings.Contains(off.log.String(), "requirements file is not installed") {
		t.Errorf("the refusal is not logged:\n%s", off.log.String())
	}
}

func dial(t testing.TB, addr string) *grpc.ClientConn { return frontendtest.DialGRPC(t, addr) }
