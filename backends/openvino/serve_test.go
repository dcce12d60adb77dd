package openvino_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/torchd/torchd/internal/npy"
	"github.com/torchd/torchd/internal/zootest"
)

// These tests serve models/openvino_ir.py's Triton repository with a real torchd (built
// here) and talk to it over REST as a Triton client would: the answers are OpenVINO's Python
// runtime's on the same IR, and hostile IR beside good models is refused while they serve.

var zooDir = filepath.Join("..", "..", "models", "out", "openvino")

// server is a torchd serving a model repository on loopback.
type server struct {
	inf string // the inference API's address
	log *bytes.Buffer
}

var listenRE = regexp.MustCompile(`msg=listening api=(\w+) addr=(\S+)`)

// serve builds torchd and starts it on repo, until the test ends.
func serve(t *testing.T, repo string) *server {
	t.Helper()
	if _, err := os.Stat(zooDir); err != nil {
		t.Fatalf("%v: run `make models-openvino` first", err)
	}
	bin := filepath.Join(t.TempDir(), "torchd")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/torchd").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "serve", "--model-repository", repo, "--inference-address", "127.0.0.1:0",
		"--management-address", "127.0.0.1:0", "--metrics-address", "127.0.0.1:0", "--grpc-address", "127.0.0.1:0",
		"--grpc-inference-address", "127.0.0.1:0", "--grpc-management-address", "127.0.0.1:0")
	// LibTorch's libraries are found by the binary's rpath (the source tree's bin/), OpenVINO's
	// by the variable: none is beside this build.
	cmd.Env = append(os.Environ(), "TORCHD_SNAPSHOT_FILE="+filepath.Join(t.TempDir(), "snapshot.json"), "TMPDIR="+t.TempDir(),
		"TORCHD_OPENVINO_LIB="+mustAbs(t, filepath.Join("..", "..", "bin", "libopenvino_c.so.2641")))
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
	})
	s := &server{log: &bytes.Buffer{}}
	addr := make(chan string, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			s.log.WriteString(sc.Text() + "\n") // read only after the process has ended
			if m := listenRE.FindStringSubmatch(sc.Text()); m != nil && m[1] == "inference" {
				addr <- m[2]
			}
		}
	}()
	select {
	case s.inf = <-addr:
	case <-done:
		cmd.Wait()
		t.Fatalf("torchd exited before it listened:\n%s", s.log)
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("torchd did not listen within a minute:\n%s", s.log)
	}
	return s
}

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// index is the repository index: each model's state and reason.
func (s *server) index(t *testing.T) map[string][2]string {
	t.Helper()
	resp, err := http.Post("http://"+s.inf+"/v2/repository/index", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var entries []struct{ Name, State, Reason string }
	if err := json.NewDecoder(resp.Body).Decode(&entries); err != nil {
		t.Fatal(err)
	}
	out := map[string][2]string{}
	for _, e := range entries {
		out[e.Name] = [2]string{e.State, e.Reason}
	}
	return out
}

// waitSettled waits until no model of the index is loading (an event of the server's, polled).
func (s *server) waitSettled(t *testing.T, names ...string) map[string][2]string {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		idx := s.index(t)
		settled := true
		for _, n := range names {
			if st := idx[n][0]; st != "READY" && st != "UNAVAILABLE" {
				settled = false
			}
		}
		if settled {
			return idx
		}
		if time.Now().After(deadline) {
			t.Fatalf("models not settled: %v", idx)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// infer sends x to model over the binary tensor extension and returns the logits.
func (s *server) infer(t *testing.T, model string, x npy.Array) (int, []float32, string) {
	t.Helper()
	hdr, _ := json.Marshal(map[string]any{
		"inputs":  []any{map[string]any{"name": "x", "datatype": "FP32", "shape": x.Shape, "parameters": map[string]any{"binary_data_size": len(x.Data)}}},
		"outputs": []any{map[string]any{"name": "logits", "parameters": map[string]any{"binary_data": true}}},
	})
	req, _ := http.NewRequest("POST", "http://"+s.inf+"/v2/models/"+model+"/infer", bytes.NewReader(append(hdr, x.Data...)))
	req.Header.Set("Inference-Header-Content-Length", strconv.Itoa(len(hdr)))
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return resp.StatusCode, nil, string(body)
	}
	n, _ := strconv.Atoi(resp.Header.Get("Inference-Header-Content-Length"))
	return 200, zootest.F32s(body[n:]), string(body[:n])
}

// TestServedEqualsPython serves the fp32 and int8 IR, and EfficientNet-Lite0's with its bf16
// hint, beside hostile ones (a cut .xml, a .bin
// a third as long as the .xml says, an input declaring 2^34 elements a sample, a config
// naming a file that is not there): the hostile models are UNAVAILABLE with a reason, and
// the good ones answer, over REST, what OpenVINO's Python runtime answers on the same IR and
// images (logits within a tolerance, the same labels), as a batch and one image at a time; a
// config that declares no tensor is completed from the graph.
func TestServedEqualsPython(t *testing.T) {
	repo := t.TempDir()
	for _, m := range []string{"resnet18_ov", "resnet18_ov_int8", "efficientnet_lite0_ov"} {
		for _, f := range []string{"config.pbtxt", "1/model.xml", "1/model.bin"} {
			zootest.CopyFile(t, filepath.Join(zooDir, m, f), filepath.Join(repo, m, f))
		}
	}
	xml, _ := os.ReadFile(filepath.Join(zooDir, "resnet18_ov_int8", "1", "model.xml"))
	bin, _ := os.ReadFile(filepath.Join(zooDir, "resnet18_ov_int8", "1", "model.bin"))
	config := func(name string) []byte {
		c, _ := os.ReadFile(filepath.Join(zooDir, "resnet18_ov_int8", "config.pbtxt"))
		return bytes.Replace(c, []byte(`"resnet18_ov_int8"`), []byte(strconv.Quote(name)), 1)
	}
	hostile := map[string][2][]byte{
		"cut_xml":   {xml[:len(xml)/2], bin},
		"short_bin": {xml, bin[:len(bin)/3]},
	}
	for name, files := range hostile {
		os.MkdirAll(filepath.Join(repo, name, "1"), 0o755)
		os.WriteFile(filepath.Join(repo, name, "config.pbtxt"), config(name), 0o644)
		os.WriteFile(filepath.Join(repo, name, "1", "model.xml"), files[0], 0o644)
		os.WriteFile(filepath.Join(repo, name, "1", "model.bin"), files[1], 0o644)
	}
	// The int8 IR with a config that declares no tensor: completed from the graph.
	os.MkdirAll(filepath.Join(repo, "auto", "1"), 0o755)
	os.WriteFile(filepath.Join(repo, "auto", "config.pbtxt"), []byte("backend: \"openvino\"\nmax_batch_size: 8\ndynamic_batching { }\n"), 0o644)
	os.WriteFile(filepath.Join(repo, "auto", "1", "model.xml"), xml, 0o644)
	os.WriteFile(filepath.Join(repo, "auto", "1", "model.bin"), bin, 0o644)
	// A graph of its own: x → ReLU → y, x declaring [1, 131072, 131072]; the config declares
	// no tensor (OpenVINO's backend completes it from the graph).
	os.MkdirAll(filepath.Join(repo, "huge_input", "1"), 0o755)
	os.WriteFile(filepath.Join(repo, "huge_input", "config.pbtxt"), []byte("name: \"huge_input\"\nbackend: \"openvino\"\nmax_batch_size: 0\n"), 0o644)
	os.WriteFile(filepath.Join(repo, "huge_input", "1", "model.xml"), []byte(hugeIR), 0o644)
	os.WriteFile(filepath.Join(repo, "huge_input", "1", "model.bin"), nil, 0o644)
	os.MkdirAll(filepath.Join(repo, "no_file", "1"), 0o755)
	os.WriteFile(filepath.Join(repo, "no_file", "config.pbtxt"), append(config("no_file"), []byte("default_model_filename: \"other.xml\"\n")...), 0o644)

	s := serve(t, repo)
	idx := s.waitSettled(t, "resnet18_ov", "resnet18_ov_int8", "efficientnet_lite0_ov", "auto", "cut_xml", "short_bin", "huge_input", "no_file")
	for name, want := range map[string]string{
		"cut_xml":    "read model.xml",
		"short_bin":  "Incorrect weights in bin file",
		"huge_input": "elements a sample",
		"no_file":    "has no other.xml",
	} {
		if idx[name][0] != "UNAVAILABLE" || !strings.Contains(idx[name][1], want) {
			t.Errorf("%s: %v, want UNAVAILABLE with %q", name, idx[name], want)
		}
		if status, _, body := s.infer(t, name, zootest.ReadNpy(t, zooDir, "ref_input.npy")); status == 200 {
			t.Errorf("%s answered: %s", name, body)
		}
	}
	x := zootest.ReadNpy(t, zooDir, "ref_input.npy")
	row := len(x.Data) / 8
	// EfficientNet-Lite0's config asks for bf16 (INFERENCE_PRECISION_HINT): its answers are
	// Python's under the same hint, which differ from f32's by far more than the tolerance.
	for _, tc := range []struct{ model, input, ref string }{
		{"resnet18_ov", "ref_input.npy", "ref_output_fp32.npy"},
		{"resnet18_ov_int8", "ref_input.npy", "ref_output_int8.npy"},
		{"efficientnet_lite0_ov", "efficientnet_lite0_ref_input.npy", "efficientnet_lite0_ref_output.npy"},
	} {
		if idx[tc.model][0] != "READY" {
			t.Fatalf("%s: %v", tc.model, idx[tc.model])
		}
		x := zootest.ReadNpy(t, zooDir, tc.input)
		want := zootest.F32s(zootest.ReadNpy(t, zooDir, tc.ref).Data)
		status, got, body := s.infer(t, tc.model, x)
		if status != 200 || len(got) != len(want) {
			t.Fatalf("%s: %d %s", tc.model, status, body)
		}
		compare(t, tc.model+" batch 8", got, want)
		for i := 0; i < 8; i += 3 {
			one := npy.Array{DType: "float32", Shape: []int64{1, 3, 224, 224}, Data: x.Data[i*row : (i+1)*row]}
			status, got, body := s.infer(t, tc.model, one)
			if status != 200 {
				t.Fatalf("%s image %d: %d %s", tc.model, i, status, body)
			}
			compare(t, tc.model+" image "+strconv.Itoa(i), got, want[i*1000:(i+1)*1000])
		}
	}
	// The config without tensors: the metadata has the graph's, and it answers as the int8 model.
	resp, err := http.Get("http://" + s.inf + "/v2/models/auto")
	if err != nil {
		t.Fatal(err)
	}
	var meta struct {
		Platform string
		Inputs   []struct {
			Name     string
			Datatype string
			Shape    []int64
		}
	}
	json.NewDecoder(resp.Body).Decode(&meta)
	resp.Body.Close()
	if meta.Platform != "openvino" || len(meta.Inputs) != 1 || meta.Inputs[0].Name != "x" || meta.Inputs[0].Datatype != "FP32" || fmt.Sprint(meta.Inputs[0].Shape) != "[-1 3 224 224]" {
		t.Errorf("auto-completed metadata: %+v", meta)
	}
	if status, got, body := s.infer(t, "auto", x); status != 200 {
		t.Errorf("auto: %d %s", status, body)
	} else {
		compare(t, "auto batch 8", got, zootest.F32s(zootest.ReadNpy(t, zooDir, "ref_output_int8.npy").Data))
	}
	// A request the model cannot take is the client's error; the model goes on answering.
	bad := npy.Array{DType: "float32", Shape: []int64{1, 3, 224, 200}, Data: make([]byte, 3*224*200*4)}
	if status, _, body := s.infer(t, "resnet18_ov_int8", bad); status != 400 {
		t.Errorf("a [1 3 224 200] image: %d %s, want 400", status, body)
	}
	if status, _, body := s.infer(t, "resnet18_ov_int8", npy.Array{Shape: []int64{1, 3, 224, 224}, Data: x.Data[:row]}); status != 200 {
		t.Errorf("after a bad request: %d %s", status, body)
	}
}

// hugeIR declares an input of 2^34 elements: refused before OpenVINO allocates it.
const hugeIR = `<?xml version="1.0"?>
<net name="huge" version="11">
	<layers>
		<layer id="0" name="x" type="Parameter" version="opset1">
			<data shape="1,131072,131072" element_type="f32" />
			<output><port id="0" precision="FP32" names="x"><dim>1</dim><dim>131072</dim><dim>131072</dim></port></output>
		</layer>
		<layer id="1" name="relu" type="ReLU" version="opset1">
			<input><port id="0" precision="FP32"><dim>1</dim><dim>131072</dim><dim>131072</dim></port></input>
			<output><port id="1" precision="FP32" names="y"><dim>1</dim><dim>131072</dim><dim>131072</dim></port></output>
		</layer>
		<layer id="2" name="y" type="Result" version="opset1">
			<input><port id="0" precision="FP32"><dim>1</dim><dim>131072</dim><dim>131072</dim></port></input>
		</layer>
	</layers>
	<edges>
		<edge from-layer="0" from-port="0" to-layer="1" to-port="0" />
		<edge from-layer="1" from-port="1" to-layer="2" to-port="0" />
	</edges>
</net>
`

// compare checks logits against Python's within a tolerance (another thread count or batch
// may sum in another order) and their labels exactly.
func compare(t *testing.T, what string, got, want []float32) {
	t.Helper()
	var diff, scale float64
	for i := range want {
		diff = math.Max(diff, math.Abs(float64(got[i]-want[i])))
		scale = math.Max(scale, math.Abs(float64(want[i])))
	}
	if diff > 1e-3*max(scale, 1) {
		t.Errorf("%s: logits differ from Python's by %g (up to %g)", what, diff, scale)
	}
	for r := 0; r < len(want)/1000; r++ {
		if g, w := argmax(got[r*1000:(r+1)*1000]), argmax(want[r*1000:(r+1)*1000]); g != w {
			t.Errorf("%s: row %d label %d, Python's %d", what, r, g, w)
		}
	}
}

func argmax(v []float32) int {
	best := 0
	for i, x := range v {
		if x > v[best] {
			best = i
		}
	}
	return best
}
