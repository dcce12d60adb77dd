package onnx

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"path/filepath"
	"testing"

	"github.com/torchd/torchd/errkind"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/handlers"
	"github.com/torchd/torchd/torch"
)

var onnxDir = filepath.Join("..", "..", "models", "out", "onnx")

// load loads a zoo ONNX model as the runtime does for an archive of it behind the tensor
// handler.
func load(t *testing.T, file string, workers int) *Model {
	t.Helper()
	am := &archive.Model{Name: "m", Dir: filepath.Dir(file), SerializedFile: filepath.Base(file), Config: archive.ModelConfig{Handler: "tensor"}}
	s := core.ModelSettings{}
	s.MinWorkers, s.MaxWorkers, s.Device = workers, workers, "cpu"
	cm, err := (&Backend{}).Load(core.LoadRequest{Name: "m", Version: "1", Archive: am, Settings: s, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cm.Close() })
	m := cm.(*Model)
	h, err := handlers.New("tensor", handlers.Context{Config: am.Config})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.BindHandler(h); err != nil {
		t.Fatal(err)
	}
	return m
}

func randomImages(n int, seed float64) handlers.Tensor {
	x := make([]byte, 0, n*3*64*64*4)
	for i := range n * 3 * 64 * 64 {
		x = binary.LittleEndian.AppendUint32(x, math.Float32bits(float32(math.Sin(float64(i)*seed))))
	}
	return handlers.Tensor{DType: torch.Float32, Shape: []int64{int64(n), 3, 64, 64}, Data: x}
}

// A batch of samples runs as one stacked run, and each sample's rows equal what it gets alone.
func TestBatchEqualsAlone(t *testing.T) {
	m := load(t, filepath.Join(onnxDir, "encoder", "model.onnx"), 2)
	ins, outs := m.Signature()
	if len(ins) != 1 || ins[0].Name != "input" || ins[0].DType != "float32" || len(outs) != 1 || outs[0].Name != "embedding" {
		t.Fatalf("signature %v -> %v", ins, outs)
	}
	batch := []*handlers.Sample{
		{Items: 1, Tensors: []handlers.Tensor{randomImages(1, 0.1)}},
		{Items: 2, Tensors: []handlers.Tensor{randomImages(2, 0.2)}},
		{Items: 1, Tensors: []handlers.Tensor{randomImages(1, 0.3)}},
	}
	together, err := m.Run(batch, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range batch {
		alone, err := m.Run([]*handlers.Sample{s}, nil)
		if err != nil {
			t.Fatal(err)
		}
		a, b := alone[0][0], together[i][0]
		if len(a.Shape) != 2 || a.Shape[0] != int64(s.Items) || len(a.Data) != len(b.Data) {
			t.Fatalf("sample %d: alone %v, batched %v", i, a.Shape, b.Shape)
		}
		for j := 0; j < len(a.Data); j += 4 {
			x := math.Float32frombits(binary.LittleEndian.Uint32(a.Data[j:]))
			y := math.Float32frombits(binary.LittleEndian.Uint32(b.Data[j:]))
			if math.Abs(float64(x-y)) > 1e-5 {
				t.Fatalf("sample %d element %d: alone %v, batched %v", i, j/4, x, y)
			}
		}
	}
}

// A request with the wrong tensors is the client's error; the model goes on serving.
func TestBadInput(t *testing.T) {
	m := load(t, filepath.Join(onnxDir, "encoder", "model.onnx"), 1)
	bad := handlers.Tensor{DType: torch.Float32, Shape: []int64{1, 3, 64}, Data: make([]byte, 3*64*4)}
	_, err := m.Run([]*handlers.Sample{{Items: 1, Tensors: []handlers.Tensor{bad}}}, nil)
	var he *handlers.Error
	if !errors.As(err, &he) || he.Kind != errkind.BadInput {
		t.Fatalf("a tensor of the wrong rank: %v, want the client's error", err)
	}
	if _, err := m.Run([]*handlers.Sample{{Items: 1, Tensors: []handlers.Tensor{randomImages(1, 1)}}}, nil); err != nil {
		t.Fatalf("after a bad request: %v", err)
	}
}

// Handlers that run their own LibTorch forward are refused with the reason.
func TestLibTorchHandlersRefused(t *testing.T) {
	m := load(t, filepath.Join(onnxDir, "encoder", "model.onnx"), 1)
	h, err := handlers.New("object_detector", handlers.Context{})
	if err != nil {
		t.Skip(err)
	}
	if err := m.BindHandler(h); err == nil || !bytes.Contains([]byte(err.Error()), []byte("own LibTorch forward")) {
		t.Errorf("the detector handler on an ONNX model: %v", err)
	}
}

// Sessions' pool threads do not spin between runs, whatever the config's parameters.
func TestOptionsNoSpinning(t *testing.T) {
	for _, ro := range []map[string]string{nil, {"graph_optimization_level": "basic", "inter_op_thread_count": "2"}} {
		o, err := options(ro, 2)
		if err != nil {
			t.Fatal(err)
		}
		if o.Spinning == nil || *o.Spinning {
			t.Errorf("options(%v): Spinning is %v, want false", ro, o.Spinning)
		}
		if o.IntraOpThreads != 2 {
			t.Errorf("options(%v): IntraOpThreads %d, want 2", ro, o.IntraOpThreads)
		}
	}
}

// A model whose sessions run an intra-op pool has its workers locked to their threads; a
// one-thread model's are not.
func TestBoundToThread(t *testing.T) {
	for threads, want := range map[int]bool{0: false, 1: false, 2: true, 4: true} {
		o, err := options(nil, threads)
		if err != nil {
			t.Fatal(err)
		}
		if got := (&Model{opts: o}).BoundToThread(); got != want {
			t.Errorf("%d threads: bound %v, want %v", threads, got, want)
		}
	}
}
