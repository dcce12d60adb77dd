package tritonpy

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/torchd/torchd/errkind"

	"github.com/torchd/torchd/archive/triton"
	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/handlerproc"
	"github.com/torchd/torchd/handlers"
	"github.com/torchd/torchd/torch"
)

// testPython is the project venv's interpreter, which has TorchServe's ts (make
// handler-runtime); TORCHD_PYTHON names another.
func testPython(t testing.TB) string {
	if p := os.Getenv("TORCHD_PYTHON"); p != "" {
		return p
	}
	p, err := filepath.Abs("../../.venv/bin/python")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := handlerproc.FindRuntime(p); err != nil {
		t.Fatalf("%v (make handler-runtime installs it)", err)
	}
	return p
}

// load loads a model of testdata/repo as the daemon would, its settings from its config.
func load(t testing.TB, name string, mod func(*core.ModelSettings)) *Model {
	t.Helper()
	tm := triton.Read("testdata/repo", name, nil)
	if tm.Err != nil {
		t.Fatal(tm.Err)
	}
	am, err := tm.Archive(tm.Versions[0])
	if err != nil {
		t.Fatal(err)
	}
	s := core.ModelSettings{BatchSize: am.Config.BatchSize.V, MinWorkers: max(1, am.Config.MinWorkers.V), ResponseTimeout: time.Minute}
	if mod != nil {
		mod(&s)
	}
	b := &Backend{Python: testPython(t)}
	if !b.Accepts(am) {
		t.Fatalf("the backend does not accept %s (runtime %q)", name, am.Config.Runtime)
	}
	m, err := b.Load(core.LoadRequest{Name: name, Version: am.Version, Archive: am, Settings: s, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m.(*Model)
}

func floats(v ...float32) []byte {
	b := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	return b
}

func strs(v ...string) []byte {
	var b []byte
	for _, s := range v {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(s)))
		b = append(b, s...)
	}
	return b
}

// sample is one request of the faulty model: rows of X (2 floats each) and one string a row.
func sample(x []float32, s ...string) *handlers.Sample {
	rows := int64(len(s))
	return &handlers.Sample{Items: int(rows), Tensors: []handlers.Tensor{
		{DType: torch.Float32, Shape: []int64{rows, 2}, Data: floats(x...)},
		{DType: torch.Bytes, Shape: []int64{rows, 1}, Data: strs(s...)},
	}}
}

func TestWireRoundTrip(t *testing.T) {
	ins := []handlers.Tensor{
		{DType: torch.Bytes, Shape: []int64{2}, Data: strs("héllo", "")},
		{DType: torch.Int64, Shape: []int64{1, 1}, Data: make([]byte, 8)},
	}
	b, err := encodeRequest("r1", []string{"TEXT", "N"}, ins, []string{"out"})
	if err != nil {
		t.Fatal(err)
	}
	n := binary.LittleEndian.Uint32(b)
	var h requestHeader
	if err := json.Unmarshal(b[4:4+n], &h); err != nil {
		t.Fatal(err)
	}
	if h.ID != "r1" || len(h.Inputs) != 2 || h.Inputs[0].Datatype != "BYTES" || h.Inputs[1].Datatype != "INT64" || h.Inputs[1].Offset%8 != 0 {
		t.Fatalf("header %+v", h)
	}
	if got := b[4+n+uint32(h.Inputs[0].Offset):][:h.Inputs[0].Size]; string(got) != string(ins[0].Data) {
		t.Errorf("TEXT's data %q", got)
	}

	outs := []handlers.Tensor{
		{Name: "a", DType: torch.Float32, Shape: []int64{1, 2}, Data: floats(1, 2)},
		{Name: "b", DType: torch.Bytes, Shape: []int64{2}, Data: strs("x", "yz")},
	}
	rb, err := encodeReply(outs)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeReply(rb)
	if err != nil {
		t.Fatal(err)
	}
	for i := range outs {
		if got[i].Name != outs[i].Name || got[i].DType != outs[i].DType || string(got[i].Data) != string(outs[i].Data) {
			t.Errorf("output %d: %+v, want %+v", i, got[i], outs[i])
		}
	}

	if _, err := encodeRequest("r", []string{"a"}, []handlers.Tensor{{DType: torch.BFloat16, Shape: []int64{1}, Data: make([]byte, 2)}}, nil); err == nil || !strings.Contains(err.Error(), "bfloat16") {
		t.Errorf("a bfloat16 input: %v", err)
	}
}

func TestWireBadReplies(t *testing.T) {
	frame := func(h string, region []byte) []byte {
		return append(binary.LittleEndian.AppendUint32(nil, uint32(len(h))), append([]byte(h), region...)...)
	}
	for name, c := range map[string]struct {
		b    []byte
		want string
	}{
		"empty":            {nil, "shorter than its header"},
		"header too long":  {binary.LittleEndian.AppendUint32(nil, 99), "shorter than its header"},
		"not json":         {frame("{", nil), "not JSON"},
		"past the data":    {frame(`{"outputs":[{"name":"a","datatype":"FP32","shape":[1],"offset":0,"size":4}]}`, nil), "runs past the reply"},
		"size and shape":   {frame(`{"outputs":[{"name":"a","datatype":"FP32","shape":[2],"offset":0,"size":4}]}`, floats(1)), "needs 8"},
		"negative shape":   {frame(`{"outputs":[{"name":"a","datatype":"FP32","shape":[-1],"offset":0,"size":4}]}`, floats(1)), "not a tensor's"},
		"unknown datatype": {frame(`{"outputs":[{"name":"a","datatype":"UINT64","shape":[1],"offset":0,"size":8}]}`, make([]byte, 8)), "UINT64"},
		"cut string":       {frame(`{"outputs":[{"name":"a","datatype":"BYTES","shape":[1],"offset":0,"size":6}]}`, []byte{9, 0, 0, 0, 'a', 'b'}), "runs past the data"},
		"string count":     {frame(`{"outputs":[{"name":"a","datatype":"BYTES","shape":[2],"offset":0,"size":5}]}`, strs("a")), "holds 1 strings"},
		"model's error":    {frame(`{"error":"no good","code":"INVALID_ARG"}`, nil), "no good"},
	} {
		_, err := decodeReply(c.b)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
	var re *replyError
	if _, err := decodeReply(frame(`{"error":"no good","code":"INVALID_ARG"}`, nil)); !errors.As(err, &re) || !errors.Is(requestError(err), errkind.BadInput) {
		t.Errorf("INVALID_ARG: %v", err)
	}
}

func readFloats(b []byte) []float32 {
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

func splitStrs(t testing.TB, b []byte) []string {
	var out []string
	for len(b) > 0 {
		n := binary.LittleEndian.Uint32(b)
		out = append(out, string(b[4:4+n]))
		b = b[4+n:]
	}
	return out
}

// TestPythonBackend runs a batch of two requests through one execute call: model.py sees
// Triton's initialize arguments, its parameters, its own modules and each request's tensors.
func TestPythonBackend(t *testing.T) {
	m := load(t, "faulty", nil)
	ins, outs := m.Signature()
	if len(ins) != 2 || len(outs) != 3 || ins[1].DType != "string" {
		t.Fatalf("signature %v %v", ins, outs)
	}
	out, err := m.Run([]*handlers.Sample{sample([]float32{1, 2}, "abc"), sample([]float32{3, 4, 5, 6}, "dé", "f")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 2 {
		t.Fatalf("%d results", len(out))
	}
	wantY := [][]float32{{2, 4}, {6, 8, 10, 12}}
	wantU := [][]string{{"ABC"}, {"DÉ", "F"}}
	for i, o := range out {
		if len(o) != 3 || o[0].Name != "Y" || o[1].Name != "U" || o[2].Name != "INFO" {
			t.Fatalf("request %d: outputs %+v", i, o)
		}
		y := readFloats(o[0].Data)
		for j := range wantY[i] {
			if math.Abs(float64(y[j]-wantY[i][j])) > 1e-6 {
				t.Errorf("request %d: Y %v, want %v", i, y, wantY[i])
			}
		}
		if u := splitStrs(t, o[1].Data); strings.Join(u, ",") != strings.Join(wantU[i], ",") || o[1].DType != torch.Bytes {
			t.Errorf("request %d: U %q, want %q", i, u, wantU[i])
		}
		var info map[string]any
		if err := json.Unmarshal([]byte(splitStrs(t, o[2].Data)[0]), &info); err != nil {
			t.Fatal(err)
		}
		repo, _ := filepath.Abs("testdata/repo/faulty")
		for k, v := range map[string]any{"model_instance_name": "faulty_0_0", "model_instance_kind": "CPU", "model_instance_device_id": "0",
			"model_version": "1", "model_name": "faulty", "model_repository": repo, "batch": float64(2)} {
			if info[k] != v {
				t.Errorf("request %d: %s = %v, want %v", i, k, info[k], v)
			}
		}
	}
	if ps := m.Processes(); len(ps) != 1 || ps[0].PID <= 0 {
		t.Errorf("processes %+v", ps)
	}
}

// Each batch runs on the share of the cores core gives it (core.ThreadCarrier), as a handler
// process's does: torch's threads in the process are the count sent with the batch, and a
// batch sent with none keeps the last.
func TestBatchRunsOnItsThreads(t *testing.T) {
	m := load(t, "faulty", nil)
	run := func(threads int) float64 {
		t.Helper()
		out, err := m.RunThreads([]*handlers.Sample{sample([]float32{1, 2}, "a")}, nil, threads)
		if err != nil {
			t.Fatal(err)
		}
		var info map[string]any
		if err := json.Unmarshal([]byte(splitStrs(t, out[0][2].Data)[0]), &info); err != nil {
			t.Fatal(err)
		}
		n, _ := info["threads"].(float64)
		return n
	}
	full := run(0)
	if full < 1 {
		t.Fatalf("torch runs %v threads in the process", full)
	}
	for _, c := range []struct{ send, want float64 }{{1, 1}, {0, 1}, {full + 1, full + 1}, {full, full}} {
		if got := run(int(c.send)); got != c.want {
			t.Errorf("sent %v threads (torch's own %v): execute ran on %v, not %v", c.send, full, got, c.want)
		}
	}
}

// TestPythonBackendFailures sends each misbehaviour alone, then a good request: each fails
// its request with its reason, and the model goes on answering.
func TestPythonBackendFailures(t *testing.T) {
	m := load(t, "faulty", func(s *core.ModelSettings) { s.ResponseTimeout = 3 * time.Second })
	good := func() {
		t.Helper()
		if _, err := m.Run([]*handlers.Sample{sample([]float32{1, 2}, "a")}, nil); err != nil {
			t.Fatalf("a good request after a bad one: %v", err)
		}
	}
	for _, c := range []struct {
		name string
		mode float32
		kind error
		want string
	}{
		{"raises", -1, errkind.Inference, "execute raised ValueError: asked to raise"},
		{"wrong number of responses", -2, errkind.Inference, "execute returned a list of 2 items; Triton's contract is a list of 1 pb_utils.InferenceResponse"},
		{"wrong type", -3, errkind.Inference, "execute's response 0 is a dict, not a pb_utils.InferenceResponse"},
		{"an error response", -5, errkind.BadInput, "X is negative"},
		{"an output of another type", -6, errkind.Inference, "output 'Y' is of numpy type float64, the config declares TYPE_FP32"},
		{"hangs", -4, errkind.Inference, "did not answer within the response timeout"},
		{"exits", -7, errkind.Inference, "exited"},
		{"calls another model (BLS)", -8, errkind.Inference, "execute raised TritonModelException: BLS (InferenceRequest.exec) is not supported"},
	} {
		_, err := m.Run([]*handlers.Sample{sample([]float32{c.mode, 0}, "a")}, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, c.kind) {
			t.Errorf("%s: %v, want %v %q", c.name, err, c.kind, c.want)
		}
		good()
	}
}

// TestPythonBackendRefusals: a model.py that cannot load fails the load with Python's
// reason; EXECUTION_ENV_PATH is refused when the repository is read.
func TestPythonBackendRefusals(t *testing.T) {
	repo := t.TempDir()
	write := func(name, config, model string) {
		os.MkdirAll(filepath.Join(repo, name, "1"), 0o755)
		os.WriteFile(filepath.Join(repo, name, "config.pbtxt"), []byte(config), 0o644)
		if model != "" {
			os.WriteFile(filepath.Join(repo, name, "1", "model.py"), []byte(model), 0o644)
		}
	}
	cfg := func(name, extra string) string {
		return `name: "` + name + `" backend: "python" input [{ name: "A" data_type: TYPE_FP32 dims: [1] }] output [{ name: "B" data_type: TYPE_FP32 dims: [1] }] ` + extra
	}
	write("noclass", cfg("noclass", ""), "x = 1\n")
	write("noexec", cfg("noexec", ""), "class TritonPythonModel:\n    pass\n")
	write("badinit", cfg("badinit", ""), "class TritonPythonModel:\n    def initialize(self, args):\n        raise RuntimeError('no weights here')\n    def execute(self, requests):\n        return []\n")
	write("autoadd", cfg("autoadd", ""), "class TritonPythonModel:\n    @staticmethod\n    def auto_complete_config(c):\n        c.add_output({'name': 'C', 'data_type': 'TYPE_FP32', 'dims': [1]})\n        return c\n    def execute(self, requests):\n        return []\n")
	write("condaenv", cfg("condaenv", `parameters { key: "EXECUTION_ENV_PATH" value: { string_value: "$$TRITON_MODEL_DIRECTORY/env.tar.gz" } }`), "")
	write("nofile", cfg("nofile", ""), "")
	py := testPython(t)
	for name, want := range map[string]string{
		"noclass": "defines no class TritonPythonModel",
		"noexec":  "has no execute(requests) method",
		"badinit": "no weights here",
		"autoadd": "auto_complete_config adds output 'C', which config.pbtxt does not declare",
	} {
		tm := triton.Read(repo, name, nil)
		if tm.Err != nil {
			t.Fatalf("%s: %v", name, tm.Err)
		}
		am, err := tm.Archive(tm.Versions[0])
		if err != nil {
			t.Fatal(err)
		}
		_, err = (&Backend{Python: py}).Load(core.LoadRequest{Name: name, Archive: am, Settings: core.ModelSettings{BatchSize: 1, MinWorkers: 1}, Log: slog.New(slog.DiscardHandler)})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", name, err, want)
		}
	}
	if tm := triton.Read(repo, "condaenv", nil); tm.Err == nil || !strings.Contains(tm.Err.Error(), "EXECUTION_ENV_PATH: torchd runs model.py in the handler runtime's Python") {
		t.Errorf("EXECUTION_ENV_PATH: %v", tm.Err)
	}
	if tm := triton.Read(repo, "nofile", nil); tm.Err == nil && tm.Versions[0].Err == nil {
		t.Errorf("a version without model.py is served")
	}
	tm := triton.Read(repo, "badinit", nil)
	am, _ := tm.Archive(tm.Versions[0])
	if _, err := (&Backend{Python: handlerproc.Off}).Load(core.LoadRequest{Name: "badinit", Archive: am}); err == nil || !strings.Contains(err.Error(), "handler processes are off") {
		t.Errorf("python off: %v", err)
	}
}

// TestPythonBackendTypes sends a tensor of every type model.py takes through it and back:
// each arrives as numpy holds it and returns byte for byte.
func TestPythonBackendTypes(t *testing.T) {
	m := load(t, "echo", nil)
	ins, _ := m.Signature()
	var ts []handlers.Tensor
	for i, in := range ins {
		dt, err := torch.ParseDType(in.DType)
		if err != nil {
			t.Fatal(err)
		}
		tn := handlers.Tensor{DType: dt, Shape: []int64{2, 3}}
		if dt == torch.Bytes {
			tn.Data = strs("", "a", "héllo", "\x00bin\xff", "6", "seven")
		} else {
			tn.Data = make([]byte, 6*dt.Size())
			for j := range tn.Data {
				tn.Data[j] = byte(i*31 + j)
			}
			if dt == torch.Bool {
				for j := range tn.Data {
					tn.Data[j] &= 1
				}
			}
		}
		ts = append(ts, tn)
	}
	out, err := m.Run([]*handlers.Sample{{Items: 1, Tensors: ts}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range out[0] {
		if o.DType != ts[i].DType || len(o.Shape) != 2 || o.Shape[0] != 2 || o.Shape[1] != 3 || string(o.Data) != string(ts[i].Data) {
			t.Errorf("%s: %v %v %x, sent %x", ins[i].Name, o.DType, o.Shape, o.Data, ts[i].Data)
		}
	}
}

// TestPythonBackendInstances: an instance_group count of 2 is two processes, each its own
// TritonPythonModel with its own instance name.
func TestPythonBackendInstances(t *testing.T) {
	m := load(t, "faulty", func(s *core.ModelSettings) { s.MinWorkers = 2 })
	if ps := m.Processes(); len(ps) != 2 || ps[0].PID == ps[1].PID {
		t.Fatalf("processes %+v", ps)
	}
	// A batch takes the process that finished last, so one caller would see one instance:
	// two callers at once keep both busy.
	var mu sync.Mutex
	seen := map[string]bool{}
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 200 {
				out, err := m.Run([]*handlers.Sample{sample([]float32{1, 2}, "a")}, nil)
				if err != nil {
					t.Error(err)
					return
				}
				var info map[string]any
				json.Unmarshal([]byte(splitStrs(t, out[0][2].Data)[0]), &info)
				name, _ := info["model_instance_name"].(string)
				mu.Lock()
				seen[name] = true
				n := len(seen)
				mu.Unlock()
				if n >= 2 {
					return
				}
			}
		}()
	}
	wg.Wait()
	if !seen["faulty_0_0"] || !seen["faulty_0_1"] || len(seen) != 2 {
		t.Errorf("instance names %v, want faulty_0_0 and faulty_0_1", seen)
	}
}
