package openvino_test

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/torchd/torchd/internal/npy"
	"github.com/torchd/torchd/openvino"
)

// zoo is the path of a file of models/openvino_ir.py's output.
func zoo(t testing.TB, parts ...string) string {
	t.Helper()
	p := filepath.Join(append([]string{"..", "models", "out", "openvino"}, parts...)...)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%v: run `make models-openvino` first", err)
	}
	return p
}

func readNpy(t testing.TB, path string) (openvino.Value, []float32) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	a, err := npy.Decode(b)
	if err != nil || a.DType != "float32" {
		t.Fatalf("%s: %v (%s)", path, err, a.DType)
	}
	return openvino.Value{Type: openvino.Float32, Shape: a.Shape, Data: a.Data}, floats(a.Data)
}

func floats(b []byte) []float32 {
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

func compile(t testing.TB, name string, o openvino.Options) *openvino.Model {
	t.Helper()
	m, err := openvino.Compile(zoo(t, name, "1", "model.xml"), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// maxDiff is the largest |got-want| and the largest |want|.
func maxDiff(got, want []float32) (diff, scale float64) {
	for i := range want {
		diff = math.Max(diff, math.Abs(float64(got[i]-want[i])))
		scale = math.Max(scale, math.Abs(float64(want[i])))
	}
	return diff, scale
}

// TestZooMatchesPython runs the zoo's IR (resnet18 fp32 and int8, EfficientNet-Lite0 with
// the bf16 hint its config sets), with a dynamic batch (unbounded and bounded) at batch 8 and
// row by row, and compiled for batch 8 at batch 8: the logits
// equal OpenVINO's Python runtime on the same IR, images and hint (within a tolerance: another
// thread count may sum in another order, in bfloat16 for the bf16 hint), and so do the labels.
func TestZooMatchesPython(t *testing.T) {
	for _, tc := range []struct {
		name, input, ref, precision string
		tol                         float64 // of the largest logit
	}{
		{"resnet18_ov", "ref_input.npy", "ref_output_fp32.npy", "f32", 1e-3},
		{"resnet18_ov_int8", "ref_input.npy", "ref_output_int8.npy", "f32", 1e-3},
		{"efficientnet_lite0_ov", "efficientnet_lite0_ref_input.npy", "efficientnet_lite0_ref_output.npy", "bf16", 2e-2},
	} {
		in, _ := readNpy(t, zoo(t, tc.input))
		_, want := readNpy(t, zoo(t, tc.ref))
		// As backends/openvino compiles it: a dynamic batch (bounded by the batch size), and
		// compiled for the batch size, for full batches.
		for _, v := range []struct {
			o     openvino.Options
			batch int64
		}{
			{openvino.Options{DynamicBatch: true}, -1},
			{openvino.Options{DynamicBatch: true, MaxBatch: 32}, -1},
			{openvino.Options{Batch: 8}, 8},
		} {
			o := v.o
			o.Precision, o.Hint, o.Streams, o.Threads = tc.precision, "LATENCY", 1, 2
			m := compile(t, tc.name, o)
			if got := m.Inputs(); len(got) != 1 || got[0].Name != "x" || got[0].Type != openvino.Float32 || !equal(got[0].Shape, []int64{v.batch, 3, 224, 224}) {
				t.Fatalf("%s: inputs %+v", tc.name, got)
			}
			if got := m.Outputs(); len(got) != 1 || got[0].Name != "logits" || !equal(got[0].Shape, []int64{v.batch, 1000}) {
				t.Fatalf("%s: outputs %+v", tc.name, got)
			}
			// bf16 is computed where the CPU has it; elsewhere the plugin runs f32.
			if p, err := m.Property("INFERENCE_PRECISION_HINT"); err != nil || p != tc.precision && p != "f32" {
				t.Errorf("%s: precision %q, %v", tc.name, p, err)
			}
			r, err := m.NewRequest()
			if err != nil {
				t.Fatal(err)
			}
			out, err := r.Infer([]openvino.Value{in})
			if err != nil {
				t.Fatal(err)
			}
			if !equal(out[0].Shape, []int64{8, 1000}) || out[0].Type != openvino.Float32 {
				t.Fatalf("%s: output %v %v", tc.name, out[0].Type, out[0].Shape)
			}
			got := floats(out[0].Data)
			diff, scale := maxDiff(got, want)
			if diff > tc.tol*max(scale, 1) {
				t.Errorf("%s %+v: batch 8 differs from Python's by %g (logits up to %g)", tc.name, v.o, diff, scale)
			}
			checkLabels(t, tc.name, got, want)
			t.Logf("%s %+v: max |torchd - Python| %g over logits up to %g", tc.name, v.o, diff, scale)
			if v.batch > 0 {
				continue
			}
			// One row at a time through the same request: its buffers follow the batch.
			row := len(in.Data) / 8
			for i := 0; i < 8; i += 3 {
				out, err := r.Infer([]openvino.Value{{Type: openvino.Float32, Shape: []int64{1, 3, 224, 224}, Data: in.Data[i*row : (i+1)*row]}})
				if err != nil {
					t.Fatal(err)
				}
				if d, _ := maxDiff(floats(out[0].Data), want[i*1000:(i+1)*1000]); d > tc.tol*max(scale, 1) {
					t.Errorf("%s: row %d alone differs from Python's by %g", tc.name, i, d)
				}
			}
		}
	}
}

func checkLabels(t *testing.T, name string, got, want []float32) {
	t.Helper()
	for i := 0; i < len(want)/1000; i++ {
		if g, w := argmax(got[i*1000:(i+1)*1000]), argmax(want[i*1000:(i+1)*1000]); g != w {
			t.Errorf("%s: image %d: label %d, Python's %d", name, i, g, w)
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

func equal(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestRequestsRunAtOnce runs one request per goroutine on one compiled model, as workers do:
// each answers its own input.
func TestRequestsRunAtOnce(t *testing.T) {
	in, _ := readNpy(t, zoo(t, "ref_input.npy"))
	_, want := readNpy(t, zoo(t, "ref_output_int8.npy"))
	m := compile(t, "resnet18_ov_int8", openvino.Options{Hint: "THROUGHPUT", Streams: 2, Threads: 2, DynamicBatch: true})
	row := len(in.Data) / 8
	var wg sync.WaitGroup
	for g := 0; g < 2; g++ {
		r, err := m.NewRequest()
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < 8; i += 2 {
				out, err := r.Infer([]openvino.Value{{Type: openvino.Float32, Shape: []int64{1, 3, 224, 224}, Data: in.Data[i*row : (i+1)*row]}})
				if err != nil {
					t.Error(err)
					return
				}
				if d, s := maxDiff(floats(out[0].Data), want[i*1000:(i+1)*1000]); d > 1e-3*max(s, 1) {
					t.Errorf("row %d differs from Python's by %g", i, d)
				}
			}
		}()
	}
	wg.Wait()
}

// TestBadInputs sends what a request must refuse: each comes back wrapping ErrBadInput with
// a message that says what is wrong, and the request goes on answering.
func TestBadInputs(t *testing.T) {
	m := compile(t, "resnet18_ov", openvino.Options{Threads: 2, DynamicBatch: true})
	r, err := m.NewRequest()
	if err != nil {
		t.Fatal(err)
	}
	good := make([]byte, 3*224*224*4)
	for _, tc := range []struct {
		name    string
		in      []openvino.Value
		message string
	}{
		{"no input", nil, "0 inputs given; the model takes 1"},
		{"wrong type", []openvino.Value{{Type: openvino.Int64, Shape: []int64{1, 3, 224, 224}, Data: make([]byte, 3*224*224*8)}}, `input "x" is f32, not i64`},
		{"wrong rank", []openvino.Value{{Type: openvino.Float32, Shape: []int64{3, 224, 224}, Data: good}}, "the model takes 4 dimensions"},
		{"wrong size", []openvino.Value{{Type: openvino.Float32, Shape: []int64{1, 3, 224, 225}, Data: good}}, "the model takes [-1 3 224 224]"},
		{"short data", []openvino.Value{{Type: openvino.Float32, Shape: []int64{1, 3, 224, 224}, Data: good[:100]}}, "602112 bytes, but 100 given"},
		{"huge shape", []openvino.Value{{Type: openvino.Float32, Shape: []int64{1 << 40, 3, 224, 224}, Data: good}}, "too many elements"},
		{"negative", []openvino.Value{{Type: openvino.Float32, Shape: []int64{-1, 3, 224, 224}, Data: good}}, "negative"},
	} {
		_, err := r.Infer(tc.in)
		if !errors.Is(err, openvino.ErrBadInput) || !strings.Contains(err.Error(), tc.message) {
			t.Errorf("%s: %v, want ErrBadInput with %q", tc.name, err, tc.message)
		}
	}
	if _, err := r.Infer([]openvino.Value{{Type: openvino.Float32, Shape: []int64{1, 3, 224, 224}, Data: good}}); err != nil {
		t.Errorf("after the bad inputs: %v", err)
	}
}

// goTypeName matches what a Go type or a raw syscall error looks like in a message.
var goTypeName = regexp.MustCompile(`\*?[a-z]+\.[A-Z]\w+|errno|syscall`)

// hostileIR writes each hostile IR into dir and returns its .xml's path.
func hostileIR(t *testing.T, dir string) map[string]string {
	t.Helper()
	xml, err := os.ReadFile(zoo(t, "resnet18_ov", "1", "model.xml"))
	if err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile(zoo(t, "resnet18_ov", "1", "model.bin"))
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, x, b []byte) string {
		p := filepath.Join(dir, name+".xml")
		if err := os.WriteFile(p, x, 0o644); err != nil {
			t.Fatal(err)
		}
		if b != nil {
			if err := os.WriteFile(filepath.Join(dir, name+".bin"), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return p
	}
	return map[string]string{
		"truncated xml": write("truncated", xml[:len(xml)/2], bin),
		"short bin":     write("short", xml, bin[:len(bin)/3]),
		"no bin":        write("nobin", xml, nil),
		"not xml":       write("text", []byte("this is not a model\n"), []byte{}),
		"huge input":    write("huge", []byte(hugeIR), []byte{}),
		"huge const":    write("hugeconst", []byte(hugeConstIR), make([]byte, 64)),
	}
}

// hugeIR declares an input of 2^34 elements a sample: refused before OpenVINO allocates.
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

// hugeConstIR declares a 16 GiB constant in a 64-byte .bin.
const hugeConstIR = `<?xml version="1.0"?>
<net name="hugeconst" version="11">
	<layers>
		<layer id="0" name="x" type="Parameter" version="opset1">
			<data shape="1,4" element_type="f32" />
			<output><port id="0" precision="FP32" names="x"><dim>1</dim><dim>4</dim></port></output>
		</layer>
		<layer id="1" name="w" type="Const" version="opset1">
			<data element_type="f32" shape="65536,65536" offset="0" size="17179869184" />
			<output><port id="0" precision="FP32"><dim>65536</dim><dim>65536</dim></port></output>
		</layer>
		<layer id="2" name="add" type="Add" version="opset1">
			<input><port id="0" precision="FP32"><dim>1</dim><dim>4</dim></port><port id="1" precision="FP32"><dim>65536</dim><dim>65536</dim></port></input>
			<output><port id="2" precision="FP32" names="y"><dim>65536</dim><dim>65536</dim></port></output>
		</layer>
		<layer id="3" name="y" type="Result" version="opset1">
			<input><port id="0" precision="FP32"><dim>65536</dim><dim>65536</dim></port></input>
		</layer>
	</layers>
	<edges>
		<edge from-layer="0" from-port="0" to-layer="2" to-port="0" />
		<edge from-layer="1" from-port="0" to-layer="2" to-port="1" />
		<edge from-layer="2" from-port="2" to-layer="3" to-port="0" />
	</edges>
</net>
`

// TestHostileIRRefused compiles each hostile IR (a cut .xml, a .bin a third as long as the
// .xml says, a 16 GiB constant in a 64-byte .bin, an input of 2^34 elements): each is refused with an error wrapping
// ErrBadModel that says why and shows no Go type, and a good model still compiles and runs.
func TestHostileIRRefused(t *testing.T) {
	irs := hostileIR(t, t.TempDir())
	for name, want := range map[string]string{
		"truncated xml": "Error parsing element attribute",
		"short bin":     "Incorrect weights in bin file",
		"no bin":        "has no weights file beside it (nobin.bin)",
		"not xml":       "Unable to read the model",
		"huge input":    "more than 268435456 elements a sample",
		"huge const":    "Incorrect weights in bin file",
	} {
		_, err := openvino.Compile(irs[name], openvino.Options{DynamicBatch: true})
		if !errors.Is(err, openvino.ErrBadModel) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want ErrBadModel with %q", name, err, want)
			continue
		}
		if goTypeName.MatchString(err.Error()) {
			t.Errorf("%s: the message shows a Go type or syscall: %v", name, err)
		}
		t.Logf("%s: %v", name, err)
	}
	m := compile(t, "resnet18_ov", openvino.Options{Threads: 2, DynamicBatch: true})
	r, err := m.NewRequest()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Infer([]openvino.Value{{Type: openvino.Float32, Shape: []int64{1, 3, 224, 224}, Data: make([]byte, 3*224*224*4)}}); err != nil {
		t.Fatal(err)
	}
}

// TestOptionsRefused: options OpenVINO would not take are refused before it reads anything.
func TestOptionsRefused(t *testing.T) {
	p := zoo(t, "resnet18_ov", "1", "model.xml")
	for _, o := range []openvino.Options{{Precision: "int4"}, {Hint: "FAST"}, {Threads: -1},
		{Batch: -1}, {MaxBatch: 4}, {DynamicBatch: true, MaxBatch: -1}, {DynamicBatch: true, Batch: 4}} {
		if _, err := openvino.Compile(p, o); !errors.Is(err, openvino.ErrBadInput) {
			t.Errorf("%+v: %v, want ErrBadInput", o, err)
		}
	}
	if _, err := openvino.Compile(filepath.Join(t.TempDir(), "none.xml"), openvino.Options{}); !errors.Is(err, openvino.ErrBadModel) {
		t.Errorf("a missing file: %v, want ErrBadModel", err)
	}
}

// TestClosed: a closed model's requests answer ErrClosed, never a freed pointer.
func TestClosed(t *testing.T) {
	m, err := openvino.Compile(zoo(t, "resnet18_ov_int8", "1", "model.xml"), openvino.Options{Threads: 1, DynamicBatch: true})
	if err != nil {
		t.Fatal(err)
	}
	r, err := m.NewRequest()
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
	m.Close()
	if _, err := r.Infer(nil); !errors.Is(err, openvino.ErrClosed) {
		t.Errorf("infer after close: %v", err)
	}
	if _, err := m.NewRequest(); !errors.Is(err, openvino.ErrClosed) {
		t.Errorf("a request after close: %v", err)
	}
	if v := openvino.Version(); !strings.HasPrefix(v, "2026.4.1") {
		t.Errorf("version %q", v)
	}
}

// TestInferContext: an inference whose context has ended is not started, and one whose
// context ends while it runs stops with the context's error; the request goes on serving.
func TestInferContext(t *testing.T) {
	m := compile(t, "resnet18_ov_int8", openvino.Options{Threads: 2, DynamicBatch: true})
	r, err := m.NewRequest()
	if err != nil {
		t.Fatal(err)
	}
	x := []openvino.Value{{Type: openvino.Float32, Shape: []int64{8, 3, 224, 224}, Data: make([]byte, 8*3*224*224*4)}}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := r.InferContext(ctx, x); !errors.Is(err, context.Canceled) {
		t.Errorf("an ended context: %v", err)
	}
	// Cancelled from another goroutine once the inference is under way (or just done: then it
	// answers, and the cancel must not touch the request afterwards).
	ctx, cancel = context.WithCancel(context.Background())
	go cancel()
	if _, err := r.InferContext(ctx, x); err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled while running: %v", err)
	}
	if _, err := r.Infer(x[:1]); err != nil {
		t.Errorf("after a cancel: %v", err)
	}
}

// reluIR is x → ReLU → y, x declared [1, 4]: a static batch of one.
const reluIR = `<?xml version="1.0"?>
<net name="relu" version="11">
	<layers>
		<layer id="0" name="x" type="Parameter" version="opset1">
			<data shape="1,4" element_type="f32" />
			<output><port id="0" precision="FP32" names="x"><dim>1</dim><dim>4</dim></port></output>
		</layer>
		<layer id="1" name="relu" type="ReLU" version="opset1">
			<input><port id="0" precision="FP32"><dim>1</dim><dim>4</dim></port></input>
			<output><port id="1" precision="FP32" names="y"><dim>1</dim><dim>4</dim></port></output>
		</layer>
		<layer id="2" name="y" type="Result" version="opset1">
			<input><port id="0" precision="FP32"><dim>1</dim><dim>4</dim></port></input>
		</layer>
	</layers>
	<edges>
		<edge from-layer="0" from-port="0" to-layer="1" to-port="0" />
		<edge from-layer="1" from-port="1" to-layer="2" to-port="0" />
	</edges>
</net>
`

// TestDynamicBatch: an IR of a static batch of one runs three rows once DynamicBatch made its
// first dimension dynamic (MaxBatch 3: up to three), or Batch made it three, and refuses them
// without, or with a bound below three; a model compiled for three rows refuses two.
func TestDynamicBatch(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "relu.xml")
	if err := os.WriteFile(p, []byte(reluIR), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "relu.bin"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	x := make([]byte, 0, 48)
	for _, v := range []float32{-1, 2, -3, 4, 5, -6, 7, -8, 0, 1, -1, 2} {
		x = binary.LittleEndian.AppendUint32(x, math.Float32bits(v))
	}
	in := []openvino.Value{{Type: openvino.Float32, Shape: []int64{3, 4}, Data: x}}
	two := []openvino.Value{{Type: openvino.Float32, Shape: []int64{2, 4}, Data: x[:32]}}
	for _, c := range []struct {
		o     openvino.Options
		takes bool  // three rows
		shape int64 // the input's first dimension
		small bool  // two rows
	}{
		{openvino.Options{}, false, 1, false},
		{openvino.Options{DynamicBatch: true}, true, -1, true},
		{openvino.Options{DynamicBatch: true, MaxBatch: 3}, true, -1, true},
		{openvino.Options{DynamicBatch: true, MaxBatch: 2}, false, -1, true},
		{openvino.Options{Batch: 3}, true, 3, false},
	} {
		c.o.Threads = 1
		m, err := openvino.Compile(p, c.o)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		if s := m.Inputs()[0].Shape; !equal(s, []int64{c.shape, 4}) {
			t.Errorf("%+v: input shape %v", c.o, s)
		}
		r, err := m.NewRequest()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.Infer(two); c.small && err != nil || !c.small && !errors.Is(err, openvino.ErrBadInput) {
			t.Errorf("%+v: two rows: %v", c.o, err)
		}
		out, err := r.Infer(in)
		if !c.takes {
			if !errors.Is(err, openvino.ErrBadInput) {
				t.Errorf("%+v: three rows: %v", c.o, err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		got := floats(out[0].Data)
		if !equal(out[0].Shape, []int64{3, 4}) || got[0] != 0 || got[1] != 2 || got[11] != 2 || got[10] != 0 {
			t.Errorf("relu of three rows: %v %v", out[0].Shape, got)
		}
	}
}
