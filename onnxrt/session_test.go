package onnxrt_test

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/torchd/torchd/onnxrt"
)

// TestModelsMatchOnnxruntime runs each zoo model's reference cases and compares the outputs
// with onnxruntime's in Python (models/onnx_zoo.py), batched and alone.
func TestModelsMatchOnnxruntime(t *testing.T) {
	for _, model := range []string{"mnist", "encoder", "bert", "external"} {
		t.Run(model, func(t *testing.T) {
			file := "model.onnx"
			if model == "bert" {
				file = "model.bin" // transformer-deploy's name; the content is ONNX
			}
			s := open(t, zoo(t, model, file), onnxrt.Options{IntraOpThreads: 2})
			for _, c := range refs(t, model) {
				out, err := s.Run(c.Inputs, c.In, c.Outputs)
				if err != nil {
					t.Fatalf("%s: %v", c.Name, err)
				}
				for i := range c.Out {
					assertClose(t, model+"/"+c.Name+"/"+c.Outputs[i], out[i], c.Out[i])
				}
			}
		})
	}
}

// TestBatchRowsEqualAlone runs the encoder's reference batch one row at a time: each row's
// embedding equals the batch's, as a server that batches requests must answer.
func TestBatchRowsEqualAlone(t *testing.T) {
	s := open(t, zoo(t, "encoder", "model.onnx"), onnxrt.Options{})
	batch := refs(t, "encoder")[0]
	if batch.Name != "batch" {
		t.Fatalf("first case is %q", batch.Name)
	}
	for i := 0; i < int(batch.In[0].Shape[0]); i++ {
		out, err := s.Run(batch.Inputs, []onnxrt.Value{row(batch.In[0], i)}, nil)
		if err != nil {
			t.Fatal(err)
		}
		assertClose(t, fmt.Sprintf("row %d", i), out[0], row(batch.Out[0], i))
	}
}

func TestInputsAndOutputs(t *testing.T) {
	dyn := func(names ...string) []string { return names }
	for _, tc := range []struct {
		file          string
		inputs, outps []onnxrt.TensorInfo
	}{
		{"mnist/model.onnx",
			[]onnxrt.TensorInfo{{Name: "input.1", Type: onnxrt.Float32, Shape: []int64{1, 1, 28, 28}, DimNames: dyn("", "", "", "")}},
			[]onnxrt.TensorInfo{{Name: "19", Type: onnxrt.Float32, Shape: []int64{1, 10}, DimNames: dyn("", "")}}},
		{"encoder/model.onnx",
			[]onnxrt.TensorInfo{{Name: "input", Type: onnxrt.Float32, Shape: []int64{-1, 3, 64, 64}, DimNames: dyn("batch", "", "", "")}},
			[]onnxrt.TensorInfo{{Name: "embedding", Type: onnxrt.Float32, Shape: []int64{-1, 64}, DimNames: dyn("batch", "")}}},
		{"bert/model.bin",
			[]onnxrt.TensorInfo{
				{Name: "input_ids", Type: onnxrt.Int64, Shape: []int64{-1, -1}, DimNames: dyn("batch", "sequence")},
				{Name: "attention_mask", Type: onnxrt.Int64, Shape: []int64{-1, -1}, DimNames: dyn("batch", "sequence")},
				{Name: "token_type_ids", Type: onnxrt.Int64, Shape: []int64{-1, -1}, DimNames: dyn("batch", "sequence")}},
			[]onnxrt.TensorInfo{{Name: "output", Type: onnxrt.Float32, Shape: []int64{-1, 2}, DimNames: dyn("batch", "")}}},
	} {
		s := open(t, zoo(t, tc.file), onnxrt.Options{})
		if got := s.Inputs(); !reflect.DeepEqual(got, tc.inputs) {
			t.Errorf("%s: inputs %+v, want %+v", tc.file, got, tc.inputs)
		}
		if got := s.Outputs(); !reflect.DeepEqual(got, tc.outps) {
			t.Errorf("%s: outputs %+v, want %+v", tc.file, got, tc.outps)
		}
	}
}

// typeSamples are six elements of each fixed-size type of the types model, as raw bytes.
func typeSample(e onnxrt.ElemType) []byte {
	b := make([]byte, 6*e.Size())
	for i := range b {
		b[i] = byte(i*37 + 11)
	}
	if e == onnxrt.Bool {
		copy(b, []byte{1, 0, 0, 1, 1, 0})
	}
	if e == onnxrt.Float16 || e == onnxrt.BFloat16 {
		for i := 0; i < len(b); i += 2 {
			b[i+1] = 0x3c // finite halves and bfloat16s
		}
	}
	return b
}

// TestTypesRoundTrip sends each type through the types model's Identity and gets the same
// bytes back, strings (NUL, UTF-8, empty, long) and empty tensors included.
func TestTypesRoundTrip(t *testing.T) {
	s := open(t, zoo(t, "types", "model.onnx"), onnxrt.Options{})
	types := map[string]onnxrt.ElemType{
		"fp32": onnxrt.Float32, "fp16": onnxrt.Float16, "bf16": onnxrt.BFloat16, "fp64": onnxrt.Float64,
		"int64": onnxrt.Int64, "int32": onnxrt.Int32, "int16": onnxrt.Int16, "int8": onnxrt.Int8,
		"uint8": onnxrt.Uint8, "bool": onnxrt.Bool, "string": onnxrt.String,
	}
	if len(s.Inputs()) != len(types) {
		t.Fatalf("types model has %d inputs, want %d", len(s.Inputs()), len(types))
	}
	strs := [][]byte{[]byte("hello"), {}, []byte("nul\x00inside"), []byte("ünïcødé ✓"), bytes.Repeat([]byte("x"), 5000), {0xff, 0xfe}}
	for _, shape := range [][]int64{{2, 3}, {0, 3}} {
		var names []string
		var in []onnxrt.Value
		for _, info := range s.Inputs() {
			tname := strings.TrimPrefix(info.Name, "in_")
			if info.Type != types[tname] || !reflect.DeepEqual(info.Shape, []int64{-1, -1}) {
				t.Fatalf("input %s: %s %v", info.Name, info.Type, info.Shape)
			}
			v := onnxrt.Value{Type: info.Type, Shape: shape}
			if shape[0] > 0 {
				if info.Type == onnxrt.String {
					v.Strings = strs
				} else {
					v.Data = typeSample(info.Type)
				}
			}
			names = append(names, info.Name)
			in = append(in, v)
		}
		out, err := s.Run(names, in, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i, o := range out {
			want := in[i]
			name := s.Outputs()[i].Name
			if o.Type != want.Type || !reflect.DeepEqual(o.Shape, want.Shape) {
				t.Errorf("%s: %s %v, want %s %v", name, o.Type, o.Shape, want.Type, want.Shape)
			}
			if want.Type == onnxrt.String {
				if len(o.Strings) != len(want.Strings) {
					t.Fatalf("%s: %d strings, want %d", name, len(o.Strings), len(want.Strings))
				}
				for j := range want.Strings {
					if !bytes.Equal(o.Strings[j], want.Strings[j]) {
						t.Errorf("%s[%d]: %q, want %q", name, j, o.Strings[j], want.Strings[j])
					}
				}
			} else if !bytes.Equal(o.Data, want.Data) && len(want.Data)+len(o.Data) > 0 {
				t.Errorf("%s: % x, want % x", name, o.Data, want.Data)
			}
		}
	}
}

// TestConcurrentRuns runs one session from several goroutines at once, each on its own rows,
// and checks every answer against the reference: ONNX Runtime's Run is thread-safe.
func TestConcurrentRuns(t *testing.T) {
	runRowsAtOnce(t, open(t, zoo(t, "encoder", "model.onnx"), onnxrt.Options{IntraOpThreads: 1}), 8, 10)
}

// runRowsAtOnce runs the encoder's reference rows on s from goroutines at once, runs each,
// and checks every answer is its own row's.
func runRowsAtOnce(t *testing.T, s *onnxrt.Session, goroutines, runs int) {
	t.Helper()
	batch := refs(t, "encoder")[0]
	rows := int(batch.In[0].Shape[0])
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range runs {
				i := (g + k) % rows
				out, err := s.Run(batch.Inputs, []onnxrt.Value{row(batch.In[0], i)}, []string{"embedding"})
				if err != nil {
					errs <- err
					return
				}
				got, want := float32s(t, out[0]), float32s(t, row(batch.Out[0], i))
				for j := range want {
					if d := got[j] - want[j]; d > 1e-5 || d < -1e-5 {
						errs <- fmt.Errorf("goroutine %d row %d element %d: %g, want %g", g, i, j, got[j], want[j])
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestOptions(t *testing.T) {
	c := refs(t, "mnist")[0]
	no, yes := false, true
	for _, o := range []onnxrt.Options{
		{GraphOptimization: "disable"},
		{GraphOptimization: "basic", IntraOpThreads: 1, InterOpThreads: 1},
		{GraphOptimization: "extended", Spinning: &no},
		{GraphOptimization: "all", Spinning: &yes, Parallel: true, InterOpThreads: 2},
		{GraphOptimization: "layout", MemArena: &no, MemPattern: &no},
		{MemArena: &yes, MemPattern: &yes, ConfigEntries: map[string]string{"session.disable_prepacking": "1"}},
	} {
		s := open(t, zoo(t, "mnist", "model.onnx"), o)
		out, err := s.Run(c.Inputs, c.In, nil)
		if err != nil {
			t.Fatalf("%+v: %v", o, err)
		}
		assertClose(t, fmt.Sprintf("%+v", o), out[0], c.Out[0])
	}
	for _, o := range []onnxrt.Options{
		{GraphOptimization: "max"}, {IntraOpThreads: -1}, {InterOpThreads: -2},
		{ConfigEntries: map[string]string{"": "1"}},
		{ConfigEntries: map[string]string{"session.disable_prepacking\x00": "1"}},
		{ConfigEntries: map[string]string{"session.disable_prepacking": "1\x00"}},
	} {
		_, err := onnxrt.NewSession(zoo(t, "mnist", "model.onnx"), o)
		if !errors.Is(err, onnxrt.ErrBadInput) {
			t.Errorf("%+v: %v, want ErrBadInput", o, err)
		} else {
			t.Logf("%v", err)
		}
	}
}

// TestRunErrors sends each kind of bad input: each gets a clear error wrapping ErrBadInput,
// and the session still answers after.
func TestRunErrors(t *testing.T) {
	s := open(t, zoo(t, "mnist", "model.onnx"), onnxrt.Options{})
	good := refs(t, "mnist")[0]
	x := good.In[0]
	f32 := func(shape ...int64) onnxrt.Value {
		n := int64(4)
		for _, d := range shape {
			n *= d
		}
		return onnxrt.Value{Type: onnxrt.Float32, Shape: shape, Data: make([]byte, n)}
	}
	for _, tc := range []struct {
		name    string
		names   []string
		in      []onnxrt.Value
		outs    []string
		message string
	}{
		{"no inputs", nil, nil, nil, "the model takes 1 (input.1)"},
		{"names and values differ", []string{"input.1", "x"}, []onnxrt.Value{x}, nil, "2 input names for 1 inputs"},
		{"two inputs", []string{"input.1", "x"}, []onnxrt.Value{x, x}, nil, "2 inputs given"},
		{"unknown name", []string{"input"}, []onnxrt.Value{x}, nil, `no input "input"; its inputs are input.1`},
		{"wrong type", []string{"input.1"}, []onnxrt.Value{{Type: onnxrt.Int64, Shape: x.Shape, Data: make([]byte, 8*784)}}, nil, "is tensor(float), not tensor(int64)"},
		{"wrong rank", []string{"input.1"}, []onnxrt.Value{f32(1, 28, 28)}, nil, "takes 4 dimensions"},
		{"wrong shape", []string{"input.1"}, []onnxrt.Value{f32(1, 1, 28, 27)}, nil, "the model takes [1 1 28 28]"},
		{"short data", []string{"input.1"}, []onnxrt.Value{{Type: onnxrt.Float32, Shape: x.Shape, Data: x.Data[:100]}}, nil, "3136 bytes, but 100 given"},
		{"unknown output", good.Inputs, good.In, []string{"output"}, `no output "output"; its outputs are 19`},
	} {
		_, err := s.Run(tc.names, tc.in, tc.outs)
		if !errors.Is(err, onnxrt.ErrBadInput) || !strings.Contains(err.Error(), tc.message) {
			t.Errorf("%s: %v, want ErrBadInput with %q", tc.name, err, tc.message)
		} else {
			t.Logf("%s: %v", tc.name, err)
		}
		assertNoGoTypeNames(t, err)
	}

	e := open(t, zoo(t, "encoder", "model.onnx"), onnxrt.Options{})
	for _, tc := range []struct {
		v       onnxrt.Value
		message string
	}{
		{onnxrt.Value{Type: onnxrt.Float32, Shape: []int64{-2, 3, 64, 64}}, "dimension -2 is negative"},
		{onnxrt.Value{Type: onnxrt.Float32, Shape: []int64{1 << 40, 3, 64, 64}}, "too many elements"},
		{onnxrt.Value{Type: onnxrt.Float32, Shape: []int64{1 << 62, 3, 64, 64}}, "too many elements"},
	} {
		_, err := e.Run([]string{"input"}, []onnxrt.Value{tc.v}, nil)
		if !errors.Is(err, onnxrt.ErrBadInput) || !strings.Contains(err.Error(), tc.message) {
			t.Errorf("shape %v: %v, want ErrBadInput with %q", tc.v.Shape, err, tc.message)
		}
	}

	ty := open(t, zoo(t, "types", "model.onnx"), onnxrt.Options{})
	var names []string
	var in []onnxrt.Value
	for _, info := range ty.Inputs() {
		v := onnxrt.Value{Type: info.Type, Shape: []int64{1, 2}, Data: make([]byte, 2*info.Type.Size())}
		if info.Type == onnxrt.String {
			v.Strings = [][]byte{[]byte("one")}
		}
		names, in = append(names, info.Name), append(in, v)
	}
	if _, err := ty.Run(names, in, nil); !errors.Is(err, onnxrt.ErrBadInput) || !strings.Contains(err.Error(), "2 strings, but 1 given") {
		t.Errorf("one string for two: %v", err)
	}
	in[len(in)-1].Strings = append(in[len(in)-1].Strings, []byte("two"))
	if _, err := ty.Run(append(names[:1:1], names...), append(in[:1:1], in...), nil); !errors.Is(err, onnxrt.ErrBadInput) {
		t.Errorf("an input twice: %v", err)
	}

	// Token ids outside BERT's vocabulary: ONNX Runtime's Gather refuses them, as the caller's error.
	b := open(t, zoo(t, "bert", "model.bin"), onnxrt.Options{})
	bert := refs(t, "bert")[1]
	ids := bert.In[0]
	bad := onnxrt.Value{Type: ids.Type, Shape: ids.Shape, Data: bytes.Repeat([]byte{0, 0, 0, 0, 0, 0, 0, 0x10}, len(ids.Data)/8)}
	_, err := b.Run(bert.Inputs, []onnxrt.Value{bad, bert.In[1], bert.In[2]}, nil)
	if !errors.Is(err, onnxrt.ErrBadInput) {
		t.Fatalf("token ids out of the vocabulary: %v, want ErrBadInput", err)
	}
	t.Logf("token ids out of the vocabulary: %v (code %s)", err, codeOf(err))
	assertNoGoTypeNames(t, err)

	// Every session still answers.
	if out, err := s.Run(good.Inputs, good.In, nil); err != nil {
		t.Fatal(err)
	} else {
		assertClose(t, "after the errors", out[0], good.Out[0])
	}
	if out, err := b.Run(bert.Inputs, bert.In, nil); err != nil {
		t.Fatal(err)
	} else {
		assertClose(t, "bert after the errors", out[0], bert.Out[0])
	}
}

func codeOf(err error) string {
	var e *onnxrt.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

func assertNoGoTypeNames(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		return
	}
	for _, s := range []string{"*onnxrt", "onnxrt.", "main.", "[]uint8", "runtime error", ".cc:", "onnxruntime::"} {
		if strings.Contains(err.Error(), s) {
			t.Errorf("error shows %q: %v", s, err)
		}
	}
}

func TestCloseTwice(t *testing.T) {
	s, err := onnxrt.NewSession(zoo(t, "mnist", "model.onnx"), onnxrt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := refs(t, "mnist")[0]
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Run(c.Inputs, c.In, nil); !errors.Is(err, onnxrt.ErrClosed) {
		t.Fatalf("Run after Close: %v", err)
	}
	if s.Inputs()[0].Name != "input.1" {
		t.Fatal("Inputs after Close changed")
	}
}

func TestVersion(t *testing.T) {
	if err := onnxrt.Init(""); err != nil {
		t.Fatal(err)
	}
	if v := onnxrt.Version(); v != "1.31.1" {
		t.Fatalf("Version() = %q", v)
	}
	if err := onnxrt.Init(""); err != nil {
		t.Fatalf("second Init: %v", err)
	}
	if err := onnxrt.Init("/elsewhere/libonnxruntime.so"); err == nil || !strings.Contains(err.Error(), "already loaded") {
		t.Fatalf("Init of another library after the first: %v", err)
	}
	t.Logf("ONNX Runtime %s from %s", onnxrt.Version(), onnxrt.LibraryPath())
}

// TestUndeclaredAndScalarShapes loads inputs declared with no shape (any rank: Shape nil) and
// as scalars (Shape empty), and runs each.
func TestUndeclaredAndScalarShapes(t *testing.T) {
	s := open(t, zoo(t, "shapes", "model.onnx"), onnxrt.Options{})
	in := s.Inputs()
	if in[0].Name != "any" || in[0].Shape != nil || in[1].Name != "scalar" || in[1].Shape == nil || len(in[1].Shape) != 0 {
		t.Fatalf("inputs %#v", in)
	}
	scalar := onnxrt.Value{Type: onnxrt.Float32, Shape: []int64{}, Data: []byte{0, 0, 0x80, 0x3f}}
	for _, shape := range [][]int64{{}, {3}, {1, 2, 1, 1, 1}} {
		n := int64(1)
		for _, d := range shape {
			n *= d
		}
		v := onnxrt.Value{Type: onnxrt.Float32, Shape: shape, Data: typeSample(onnxrt.Int32)[:4*n]}
		out, err := s.Run([]string{"any", "scalar"}, []onnxrt.Value{v, scalar}, nil)
		if err != nil {
			t.Fatalf("shape %v: %v", shape, err)
		}
		if !reflect.DeepEqual(out[0].Shape, shape) || !bytes.Equal(out[0].Data, v.Data) || !bytes.Equal(out[1].Data, scalar.Data) {
			t.Fatalf("shape %v: got %+v", shape, out)
		}
	}
	_, err := s.Run([]string{"any", "scalar"}, []onnxrt.Value{scalar, {Type: onnxrt.Float32, Shape: []int64{1}, Data: scalar.Data}}, nil)
	if !errors.Is(err, onnxrt.ErrBadInput) || !strings.Contains(err.Error(), "takes 0 dimensions") {
		t.Fatalf("a [1] tensor for a scalar: %v", err)
	}
}

// TestSequencesRefused loads models with a sequence input and a sequence output: they load,
// the input reads as Undefined, and running either gives a clear error.
func TestSequencesRefused(t *testing.T) {
	in := open(t, zoo(t, "sequence", "seq_in.onnx"), onnxrt.Options{})
	if got := in.Inputs()[0]; got.Name != "s" || got.Type != onnxrt.Undefined {
		t.Fatalf("sequence input: %+v", got)
	}
	_, err := in.Run([]string{"s"}, []onnxrt.Value{{Type: onnxrt.Float32, Shape: []int64{1}, Data: make([]byte, 4)}}, nil)
	if !errors.Is(err, onnxrt.ErrBadInput) || !strings.Contains(err.Error(), `input "s" is not a tensor`) {
		t.Fatalf("a tensor for a sequence input: %v", err)
	}
	out := open(t, zoo(t, "sequence", "seq_out.onnx"), onnxrt.Options{})
	if got := out.Outputs()[0]; got.Name != "s" || got.Type != onnxrt.Undefined {
		t.Fatalf("sequence output: %+v", got)
	}
	_, err = out.Run([]string{"x"}, []onnxrt.Value{{Type: onnxrt.Float32, Shape: []int64{2}, Data: make([]byte, 8)}}, nil)
	if err == nil || !strings.Contains(err.Error(), `output "s" is not a tensor`) {
		t.Fatalf("a sequence output: %v", err)
	}
	t.Logf("%v", err)
	assertNoGoTypeNames(t, err)
}

// TestCloseDuringRuns closes a session while goroutines run it: each run either answers or
// gets ErrClosed, and Close returns once the runs in progress have ended.
func TestCloseDuringRuns(t *testing.T) {
	s, err := onnxrt.NewSession(zoo(t, "encoder", "model.onnx"), onnxrt.Options{IntraOpThreads: 1})
	if err != nil {
		t.Fatal(err)
	}
	c := refs(t, "encoder")[0]
	started := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; ; k++ {
				if k == 1 && g == 0 {
					close(started)
				}
				_, err := s.Run(c.Inputs, c.In, nil)
				if errors.Is(err, onnxrt.ErrClosed) {
					return
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	<-started
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
