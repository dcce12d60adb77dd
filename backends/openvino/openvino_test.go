package openvino_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/backends/openvino"
	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/errkind"
	"github.com/torchd/torchd/handlers"
	"github.com/torchd/torchd/internal/zootest"
	"github.com/torchd/torchd/torch"
)

// dirArchive is a directory archive of the zoo's int8 IR, as a TorchServe user would make
// it: model-config.toml naming model.xml, with model.bin beside.
func dirArchive(t *testing.T) *archive.Model {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []string{"model.xml", "model.bin"} {
		zootest.CopyFile(t, filepath.Join(zooDir, "resnet18_ov_int8", "1", f), filepath.Join(dir, f))
	}
	cfg := "handler = \"tensor\"\nserialized_file = \"model.xml\"\nbatch_size = 8\n"
	if err := os.WriteFile(filepath.Join(dir, "model-config.toml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	am, err := archive.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { am.Close() })
	return am
}

func load(t *testing.T, am *archive.Model, batch int) *openvino.Model {
	t.Helper()
	b := &openvino.Backend{}
	if !b.Accepts(am) {
		t.Fatalf("the backend does not accept %s", am.SerializedFile)
	}
	s := core.ModelSettings{BatchSize: batch, MinWorkers: 1, MaxWorkers: 1, Device: "cpu"}
	cm, err := b.Load(core.LoadRequest{Name: "m", Version: "1", Archive: am, Settings: s, Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cm.Close() })
	m := cm.(*openvino.Model)
	h, err := handlers.New("tensor", handlers.Context{Config: am.Config})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.BindHandler(h); err != nil {
		t.Fatal(err)
	}
	return m
}

// An archive's IR loads; a batch of samples runs as one inference, and each sample's rows
// are Python's answers for its images.
func TestArchiveBatch(t *testing.T) {
	m := load(t, dirArchive(t), 8)
	ins, outs := m.Signature()
	if len(ins) != 1 || ins[0].Name != "x" || ins[0].DType != "float32" || len(outs) != 1 || outs[0].Name != "logits" {
		t.Fatalf("signature %v -> %v", ins, outs)
	}
	x := zootest.ReadNpy(t, zooDir, "ref_input.npy")
	want := zootest.F32s(zootest.ReadNpy(t, zooDir, "ref_output_int8.npy").Data)
	row := len(x.Data) / 8
	sample := func(from, n int) *handlers.Sample {
		return &handlers.Sample{Items: n, Tensors: []handlers.Tensor{{DType: torch.Float32, Shape: []int64{int64(n), 3, 224, 224}, Data: x.Data[from*row : (from+n)*row]}}}
	}
	batch := []*handlers.Sample{sample(0, 1), sample(1, 3), sample(4, 4)}
	res, err := m.Run(batch, nil)
	if err != nil {
		t.Fatal(err)
	}
	at := 0
	for i, s := range batch {
		got := res[i][0]
		if got.Shape[0] != int64(s.Items) || got.Name != "logits" {
			t.Fatalf("sample %d: %v %q", i, got.Shape, got.Name)
		}
		compare(t, "sample", zootest.F32s(got.Data), want[at*1000:(at+s.Items)*1000])
		at += s.Items
	}
}

// A request with the wrong tensors is the client's error; the model goes on serving.
func TestBadInput(t *testing.T) {
	m := load(t, dirArchive(t), 8)
	bad := handlers.Tensor{DType: torch.Float32, Shape: []int64{1, 3, 224}, Data: make([]byte, 3*224*4)}
	_, err := m.Run([]*handlers.Sample{{Items: 1, Tensors: []handlers.Tensor{bad}}}, nil)
	var he *handlers.Error
	if !errors.As(err, &he) || he.Kind != errkind.BadInput || !strings.Contains(err.Error(), "dimensions") {
		t.Fatalf("a tensor of the wrong rank: %v, want the client's error", err)
	}
	good := handlers.Tensor{DType: torch.Float32, Shape: []int64{1, 3, 224, 224}, Data: make([]byte, 3*224*224*4)}
	if _, err := m.Run([]*handlers.Sample{{Items: 1, Tensors: []handlers.Tensor{good}}}, nil); err != nil {
		t.Fatalf("after a bad request: %v", err)
	}
}

// A model on a GPU, or behind a handler with its own LibTorch forward, is refused with the reason.
func TestRefused(t *testing.T) {
	am := dirArchive(t)
	_, err := (&openvino.Backend{}).Load(core.LoadRequest{Archive: am, Settings: core.ModelSettings{Device: "cuda:0"}})
	if err == nil || !strings.Contains(err.Error(), "torchd runs OpenVINO on the CPU") {
		t.Errorf("on cuda:0: %v", err)
	}
	m := load(t, am, 1)
	h, err := handlers.New("object_detector", handlers.Context{})
	if err != nil {
		t.Skip(err)
	}
	if err := m.BindHandler(h); err == nil || !strings.Contains(err.Error(), "own LibTorch forward") {
		t.Errorf("the detector handler on an OpenVINO model: %v", err)
	}
}
