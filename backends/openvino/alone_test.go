package openvino

import (
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/handlers"
	"github.com/torchd/torchd/internal/zootest"
	"github.com/torchd/torchd/torch"
)

// With two workers a batch that runs alone takes the one-stream model on both workers'
// threads, and answers as the per-worker streams do (Python's answers on the same IR); with
// one worker, or streams the config sets, there is no second model.
func TestAloneTakesEveryThread(t *testing.T) {
	zoo := filepath.Join("..", "..", "models", "out", "openvino")
	for _, c := range []struct {
		name    string
		workers int
		streams string // the config's NUM_STREAMS (a Triton parameter)
		alone   bool
	}{
		{"two workers", 2, "", true},
		{"one worker", 1, "", false},
		{"streams set", 2, "2", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, f := range []string{"model.xml", "model.bin"} {
				zootest.CopyFile(t, filepath.Join(zoo, "resnet18_ov_int8", "1", f), filepath.Join(dir, f))
			}
			cfg := "handler = \"tensor\"\nserialized_file = \"model.xml\"\nbatch_size = 8\n"
			if err := os.WriteFile(filepath.Join(dir, "model-config.toml"), []byte(cfg), 0o644); err != nil {
				t.Fatal(err)
			}
			am, err := archive.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer am.Close()
			if c.streams != "" {
				am.Config.RuntimeOptions = map[string]string{"NUM_STREAMS": c.streams}
			}
			s := core.ModelSettings{BatchSize: 8, MinWorkers: c.workers, MaxWorkers: c.workers, Device: "cpu"}
			cm, err := (&Backend{}).Load(core.LoadRequest{Name: "m", Version: "1", Archive: am, Settings: s, Threads: 1})
			if err != nil {
				t.Fatal(err)
			}
			m := cm.(*Model)
			defer m.Close()
			if (m.alone != nil) != c.alone {
				t.Fatalf("a one-stream model: %v, want %v", m.alone != nil, c.alone)
			}
			h, err := handlers.New("tensor", handlers.Context{Config: am.Config})
			if err != nil {
				t.Fatal(err)
			}
			if err := m.BindHandler(h); err != nil {
				t.Fatal(err)
			}
			x := zootest.ReadNpy(t, zoo, "ref_input.npy")
			want := zootest.F32s(zootest.ReadNpy(t, zoo, "ref_output_int8.npy").Data)
			res, err := m.Run([]*handlers.Sample{{Items: 8, Tensors: []handlers.Tensor{{DType: torch.Float32, Shape: []int64{8, 3, 224, 224}, Data: x.Data}}}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			// The request of the model that ran is back in its place, and only that one was made.
			if c.alone && (m.aloneReq == nil || m.made != 0) || !c.alone && m.made != 1 {
				t.Errorf("after a lone batch: alone's request %v, stream requests made %d", m.aloneReq != nil, m.made)
			}
			got := zootest.F32s(res[0][0].Data)
			var diff, scale float64
			for i := range want {
				diff, scale = math.Max(diff, math.Abs(float64(got[i]-want[i]))), math.Max(scale, math.Abs(float64(want[i])))
			}
			if diff > 1e-3*max(scale, 1) {
				t.Errorf("logits differ from Python's by %g (up to %g)", diff, scale)
			}
		})
	}
}
