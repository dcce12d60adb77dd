package served_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/torchd/torchd/core/coretest"
	"github.com/torchd/torchd/frontend/frontendtest"
	"github.com/torchd/torchd/frontend/metrics"
	"github.com/torchd/torchd/handlerproc"
	pb "github.com/torchd/torchd/proto/inference"
	"google.golang.org/grpc"
)

// archiveMNIST packs TorchServe's MNIST example network (seeded random weights, the
// daemon's TorchServe comparison's) with handler into store as NAME.mar, with
// torch-model-archiver.
func archiveMNIST(t testing.TB, py, store, name, handler string) {
	t.Helper()
	src := t.TempDir()
	copyFile := func(from, to string) {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(src, to), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	copyFile("../testdata/tsdiff/mnist_model.py", "mnist.py")
	copyFile(handler, filepath.Base(handler))
	args := []string{"--model-name", name, "--version", "1.0", "--model-file", "mnist.py", "--serialized-file", "weights.pt",
		"--handler", filepath.Base(handler), "--export-path", store, "--force"}
	stateDict(t, py, src, "weights.pt", "import torch, mnist; torch.manual_seed(0); torch.save(mnist.Net().state_dict(), 'weights.pt')")
	archiver(t, py, src, args...)
}

// digitPNG is a 28×28 grayscale PNG whose pattern depends on seed.
func digitPNG(t testing.TB, seed int) []byte {
	img := image.NewGray(image.Rect(0, 0, 28, 28))
	for y := range 28 {
		for x := range 28 {
			img.SetGray(x, y, color.Gray{Y: uint8((x*(seed+3) + y*y*(seed+1) + seed*37) % 256)})
		}
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// The rest of TorchServe's API reaching a Python handler (#65): KServe v1 and v2 through
// TorchServe's envelopes, and explanations through the handler's explain_handle, on
// TorchServe's MNIST example (an ImageClassifier subclass over an eager model).
func TestPythonHandlerKServeAndExplanations(t *testing.T) {
	py := venvPython(t)
	s := serve(t, "", &handlerproc.Backend{Python: py})
	archiveMNIST(t, py, s.store, "pymnist", "../testdata/tsdiff/mnist_handler.py")
	s.register(t, "url=pymnist.mar&batch_size=4&max_batch_delay=50&initial_workers=1&synchronous=true")

	pngs := [][]byte{digitPNG(t, 0), digitPNG(t, 1), digitPNG(t, 2)}
	b64 := make([]string, len(pngs))
	digits := make([]int, len(pngs))
	for i, p := range pngs {
		b64[i] = base64.StdEncoding.EncodeToString(p)
		r := s.inf("POST", "/predictions/pymnist", "image/png", p)
		if r.status != 200 {
			t.Fatalf("predictions %d: %d %s", i, r.status, r.body)
		}
		r.json(t, &digits[i])
	}
	t.Logf("digits: %v", digits)

	// A client's explain header does not make a prediction an explanation: TorchServe's
	// frontend sets it to False on every prediction.
	if r := s.inf("POST", "/predictions/pymnist", "image/png", pngs[0], "explain", "True"); r.status != 200 || strings.TrimSpace(string(r.body)) != fmt.Sprint(digits[0]) {
		t.Errorf("a prediction with the header explain: True: %d %.200s", r.status, r.body)
	}

	t.Run("v1 predict", func(t *testing.T) {
		// Each instance is a row of the handler's batch, as TorchServe's kserve envelope
		// hands them: {"data": base64} is decoded by ImageClassifier itself.
		body := fmt.Sprintf(`{"instances":[{"data":%q},{"data":%q},{"data":%q}]}`, b64[0], b64[1], b64[2])
		r := s.inf("POST", "/v1/models/pymnist:predict", "application/json", []byte(body))
		var got struct{ Predictions []int }
		if r.status != 200 {
			t.Fatalf("%d %s", r.status, r.body)
		}
		r.json(t, &got)
		if fmt.Sprint(got.Predictions) != fmt.Sprint(digits) {
			t.Errorf("predictions %v, want %v (the images' /predictions answers)", got.Predictions, digits)
		}
		// Bad instances are the client's error; the model goes on.
		for _, bad := range []string{`{"instances":{"data":"x"}}`, `{"instances":[]}`, `{"instances":[{"data":1},{"data":`} {
			if r := s.inf("POST", "/v1/models/pymnist:predict", "application/json", []byte(bad)); r.status != 400 {
				t.Errorf("%s: %d %s, want 400", bad, r.status, r.body)
			}
		}
		// What the handler cannot read is its own error (TorchServe's 503), for that request only.
		if r := s.inf("POST", "/v1/models/pymnist:predict", "application/json", []byte(`{"instances":[{"data":"bm90IGFuIGltYWdl"}]}`)); r.status < 500 {
			t.Errorf("an instance that is not an image: %d %s", r.status, r.body)
		}
	})

	t.Run("v2 infer", func(t *testing.T) {
		// Each input is a row: a BYTES input's first element is the handler's data, and the
		// answer for input i is the output named after it, with NumPy's datatype.
		body := fmt.Sprintf(`{"id":"req-7","inputs":[{"name":"a","shape":[1],"datatype":"BYTES","data":[%q]},{"name":"b","shape":[1],"datatype":"BYTES","data":[%q]}]}`, b64[1], b64[2])
		r := s.inf("POST", "/v2/models/pymnist/infer", "application/json", []byte(body))
		if r.status != 200 {
			t.Fatalf("%d %s", r.status, r.body)
		}
		var got struct {
			ID        string `json:"id"`
			ModelName string `json:"model_name"`
			Outputs   []struct {
				Name     string  `json:"name"`
				Datatype string  `json:"datatype"`
				Shape    []int64 `json:"shape"`
				Data     []int   `json:"data"`
			} `json:"outputs"`
		}
		r.json(t, &got)
		if got.ID != "req-7" || got.ModelName != "pymnist" || len(got.Outputs) != 2 {
			t.Fatalf("%s", r.body)
		}
		for i, o := range got.Outputs {
			want := digits[i+1]
			if o.Name != []string{"a", "b"}[i] || o.Datatype != "INT64" || fmt.Sprint(o.Shape) != "[1]" || len(o.Data) != 1 || o.Data[0] != want {
				t.Errorf("output %d: %+v, want digit %d", i, o, want)
			}
		}
		// A tensor input reaches the handler as nested lists of its shape: ImageClassifier
		// makes a tensor of it.
		img := make([]string, 28*28)
		for i := range img {
			img[i] = "0.5"
		}
		body = `{"inputs":[{"name":"t","shape":[1,28,28],"datatype":"FP32","data":[` + strings.Join(img, ",") + `]}]}`
		if r := s.inf("POST", "/v2/models/pymnist/infer", "application/json", []byte(body)); r.status != 200 || !strings.Contains(string(r.body), `"name":"t"`) {
			t.Errorf("a tensor input: %d %s", r.status, r.body)
		}
		// The same over gRPC: a BYTES input's base64 text is the handler's data.
		oipc := pb.NewGRPCInferenceServiceClient(dial(t, s.listenOIP(t)))
		gr, err := oipc.ModelInfer(context.Background(), &pb.ModelInferRequest{ModelName: "pymnist", Inputs: []*pb.ModelInferRequest_InferInputTensor{
			{Name: "g", Datatype: "BYTES", Shape: []int64{1}, Contents: &pb.InferTensorContents{BytesContents: [][]byte{[]byte(b64[2])}}}}})
		if err != nil {
			t.Fatalf("gRPC: %v", err)
		}
		if o := gr.GetOutputs(); len(o) != 1 || o[0].GetName() != "g" || o[0].GetDatatype() != "INT64" || fmt.Sprint(o[0].GetContents().GetInt64Contents()) != fmt.Sprint([]int{digits[2]}) {
			t.Errorf("gRPC: %v, want digit %d", gr, digits[2])
		}
		// FP16 has no exact JSON for the handler: the client's error.
		body = `{"inputs":[{"name":"h","shape":[1],"datatype":"FP16","data":[1]}]}`
		if r := s.inf("POST", "/v2/models/pymnist/infer", "application/json", []byte(body)); r.status != 400 {
			t.Errorf("an FP16 input: %d %s, want 400", r.status, r.body)
		}
	})

	t.Run("explanations", func(t *testing.T) {
		// TorchServe's /explanations: the handler's explain_handle (Captum's Integrated
		// Gradients), its answer for one image an attribution of its [1, 28, 28] input.
		r := s.inf("POST", "/explanations/pymnist", "image/png", pngs[0])
		if r.status != 200 {
			t.Fatalf("explanations: %d %.300s", r.status, r.body)
		}
		var attr [][][]float64
		r.json(t, &attr)
		if len(attr) != 1 || len(attr[0]) != 28 || len(attr[0][0]) != 28 {
			t.Fatalf("attribution shape: %.300s", r.body)
		}
		flat := flattenFloats(attr)
		if nonzero(flat) == 0 {
			t.Fatalf("an attribution of zeros")
		}
		// PUT, as curl -T sends it in TorchServe's READMEs.
		if r := s.inf("PUT", "/explanations/pymnist", "image/png", pngs[0]); r.status != 200 {
			t.Errorf("PUT /explanations: %d %.200s", r.status, r.body)
		}

		// KServe v1 :explain: {"explanations": the rows' answers}.
		r = s.inf("POST", "/v1/models/pymnist:explain", "application/json", []byte(fmt.Sprintf(`{"instances":[{"data":%q}]}`, b64[0])))
		if r.status != 200 {
			t.Fatalf("v1 explain: %d %.300s", r.status, r.body)
		}
		var v1 struct{ Explanations [][][][]float64 }
		r.json(t, &v1)
		if len(v1.Explanations) != 1 {
			t.Fatalf("v1 explain: %.300s", r.body)
		}
		closeFloats(t, "v1 explain", flattenFloats(v1.Explanations[0]), flat, 1e-6)

		// KServe v2 explain: the attribution flattened, named after the input, FP64.
		body := fmt.Sprintf(`{"inputs":[{"name":"img","shape":[1],"datatype":"BYTES","data":[%q]}]}`, b64[0])
		r = s.inf("POST", "/v2/models/pymnist/explain", "application/json", []byte(body))
		if r.status != 200 {
			t.Fatalf("v2 explain: %d %.300s", r.status, r.body)
		}
		var v2 struct {
			Outputs []struct {
				Name     string    `json:"name"`
				Datatype string    `json:"datatype"`
				Shape    []int64   `json:"shape"`
				Data     []float64 `json:"data"`
			} `json:"outputs"`
		}
		r.json(t, &v2)
		if len(v2.Outputs) != 1 || v2.Outputs[0].Name != "img" || v2.Outputs[0].Datatype != "FP64" || fmt.Sprint(v2.Outputs[0].Shape) != "[784]" {
			t.Fatalf("v2 explain: %.300s", r.body)
		}
		closeFloats(t, "v2 explain", v2.Outputs[0].Data, flat, 1e-6)
	})
}

func flattenFloats(v any) []float64 {
	b, _ := json.Marshal(v)
	var nested any
	json.Unmarshal(b, &nested)
	var out []float64
	var walk func(any)
	walk = func(x any) {
		switch y := x.(type) {
		case []any:
			for _, e := range y {
				walk(e)
			}
		case float64:
			out = append(out, y)
		}
	}
	walk(nested)
	return out
}

func nonzero(v []float64) int {
	n := 0
	for _, x := range v {
		if x != 0 {
			n++
		}
	}
	return n
}

func closeFloats(t *testing.T, what string, got, want []float64, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	worst := 0.0
	for i := range got {
		worst = math.Max(worst, math.Abs(got[i]-want[i]))
	}
	if worst > tol {
		t.Errorf("%s: differs from /explanations by up to %g", what, worst)
	}
}

// A handler's custom metrics (context.metrics) work as in TorchServe with its
// metrics_config, and are served on the metrics port as TorchServe's prometheus mode serves
// them: declared ones by their metrics.yaml dimensions, undeclared ones by auto-detection.
func TestPythonHandlerCustomMetrics(t *testing.T) {
	py := venvPython(t)
	config, err := filepath.Abs("../testdata/tsapi/metrics.yaml")
	if err != nil {
		t.Fatal(err)
	}
	b := &handlerproc.Backend{Python: py, MetricsConfig: config}
	s := serve(t, "", b)
	// What the daemon does with metrics_config and model_metrics_auto_detect.
	specs, err := metrics.ReadTorchServeMetricsConfig(config)
	if err != nil {
		t.Fatal(err)
	}
	s.metrics.SetHandlerMetrics(specs, true)
	b.OnMetric = func(_ string, hm handlerproc.Metric) {
		names, values := make([]string, len(hm.Dims)), make([]string, len(hm.Dims))
		for i, d := range hm.Dims {
			names[i], values[i] = d.Name, d.Value
		}
		s.metrics.HandlerMetric(hm.Name, hm.Unit, hm.Type, names, values, hm.Host, hm.Value)
	}
	archiveMNIST(t, py, s.store, "pymetrics", "../testdata/tsapi/metrics_handler.py")
	s.register(t, "url=pymetrics.mar&initial_workers=1&synchronous=true")
	png := digitPNG(t, 0)
	for i := range 2 {
		// Without the metrics_config, get_metric raises and every request fails (503).
		if r := s.inf("POST", "/predictions/pymetrics", "image/png", png); r.status != 200 {
			t.Fatalf("request %d: %d %s", i, r.status, r.body)
		}
	}
	host, _ := os.Hostname()
	want := []string{
		"# HELP DigitRequests Torchserve prometheus counter metric with unit: count\n# TYPE DigitRequests counter\n",
		fmt.Sprintf("DigitRequests{Hostname=%q,} 2.0\n", host),
		fmt.Sprintf("DigitLoads{ModelName=\"pymetrics\",Level=\"Model\",Hostname=%q,} 1.0\n", host),
		fmt.Sprintf("DigitBatch{ModelName=\"pymetrics\",Hostname=%q,} 1.0\n", host),
		fmt.Sprintf("DigitBytes{ModelName=\"pymetrics\",Level=\"Model\",Hostname=%q,} %s\n", host, javaDoubleOf(float64(len(png))/1024)),
		// Auto-detected: labelled by the dimensions the line names.
		"# TYPE DigitStepTime gauge\n",
		fmt.Sprintf("DigitStepTime{Step=\"preprocess\",ModelName=\"pymetrics\",Level=\"Model\",Hostname=%q,} 2.5\n", host),
		"# TYPE DigitShare histogram\n",
		fmt.Sprintf("DigitShare_bucket{ModelName=\"pymetrics\",Level=\"Model\",Hostname=%q,le=\"10.0\",} 0.0\n", host),
		fmt.Sprintf("DigitShare_bucket{ModelName=\"pymetrics\",Level=\"Model\",Hostname=%q,le=\"+Inf\",} 2.0\n", host),
		fmt.Sprintf("DigitShare_count{ModelName=\"pymetrics\",Level=\"Model\",Hostname=%q,} 2.0\n", host),
		fmt.Sprintf("DigitShare_sum{ModelName=\"pymetrics\",Level=\"Model\",Hostname=%q,} 100.0\n", host),
	}
	// The worker prints its metrics as it runs; they reach torchd with its output, after
	// the answer: wait until the second request's count is in.
	var text string
	coretest.WaitFor(t, "the second request's metrics", func() bool {
		text = string(do(s.metrics.Routes(), "GET", "/metrics", "", nil).body)
		return strings.Contains(text, want[1]) && strings.Contains(text, want[len(want)-1])
	})
	for _, w := range want {
		if !strings.Contains(text, w) {
			t.Errorf("/metrics has no %q", w)
		}
	}
	// torchd writes HandlerTime itself: the worker's own line does not make a second series.
	if n := strings.Count(text, "\nHandlerTime{"); n != 1 {
		t.Errorf("%d HandlerTime series, want torchd's one", n)
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", text)
	}
}

// javaDoubleOf is v as TorchServe's Java client writes it, for the values this test sends.
func javaDoubleOf(v float64) string {
	s := strconv.FormatFloat(v, 'f', -1, 64)
	if !strings.Contains(s, ".") {
		s += ".0"
	}
	return s
}

// listenOIP serves the Open Inference Protocol's gRPC API on a port of 127.0.0.1.
func (s *served) listenOIP(t testing.TB) string {
	return frontendtest.ListenGRPC(t, func(g *grpc.Server) { pb.RegisterGRPCInferenceServiceServer(g, s.ks.InferenceService()) })
}
