package openvino

import (
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/handlers"
	"github.com/torchd/torchd/internal/zootest"
	ov "github.com/torchd/torchd/openvino"
	"github.com/torchd/torchd/torch"
)

// Each compiled variant runs the batches it is for and answers as OpenVINO's Python runtime
// does on the same IR: a forward of the rows the forwards run most often (the batch size's,
// or the forward batch's and the preferred sizes' remainders) the model compiled for that
// size, any other the dynamic one; with two workers a batch that runs alone takes the
// one-stream model on both workers' threads. With one worker, or streams the config sets,
// there is no one-stream model; with FULL_BATCH_MODEL false, no fixed-size one. Every variant
// leaves its threads unpinned unless ENABLE_CPU_PINNING is true.
func TestVariantChosen(t *testing.T) {
	zoo := filepath.Join("..", "..", "models", "out", "openvino")
	x := zootest.ReadNpy(t, zoo, "ref_input.npy")
	want := zootest.F32s(zootest.ReadNpy(t, zoo, "ref_output_int8.npy").Data)
	const batch = 8
	for _, c := range []struct {
		name    string
		workers int
		options map[string]string // the config's parameters
		alone   bool
		rows    []int // the row counts compiled for
		pinned  bool
		forward int   // forward_batch
		pref    []int // preferred_batch_size
	}{
		{"two workers", 2, nil, true, []int{batch}, false, 0, nil},
		{"one worker", 1, nil, false, []int{batch}, false, 0, nil},
		{"streams set", 2, map[string]string{"NUM_STREAMS": "2"}, false, []int{batch}, false, 0, nil},
		{"no full-batch model", 2, map[string]string{"FULL_BATCH_MODEL": "false"}, true, nil, false, 0, nil},
		{"pinned", 2, map[string]string{"ENABLE_CPU_PINNING": "true"}, true, []int{batch}, true, 0, nil},
		// Batches of 8 run as forwards of 3, 3 and 2; of 6, as 3 and 3; of 4, as 3 and 1.
		{"forward batch and preferred sizes", 2, nil, true, []int{1, 2, 3}, false, 3, []int{4, 6}},
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
			am.Config.RuntimeOptions = c.options
			s := core.ModelSettings{BatchSize: batch, MinWorkers: c.workers, MaxWorkers: c.workers, Device: "cpu",
				ForwardBatch: c.forward, PreferredBatchSize: c.pref}
			cm, err := (&Backend{}).Load(core.LoadRequest{Name: "m", Version: "1", Archive: am, Settings: s, Threads: 1})
			if err != nil {
				t.Fatal(err)
			}
			m := cm.(*Model)
			defer m.Close()
			if (m.alone != nil) != c.alone || !slices.Equal(sortedKeys(m.static), c.rows) {
				t.Fatalf("one-stream model %v, compiled for rows %v; want %v, %v", m.alone != nil, sortedKeys(m.static), c.alone, c.rows)
			}
			if kept, err := m.PlanRows(core.ForwardRows(s)); err != nil || !slices.Equal(kept, c.rows) {
				t.Fatalf("PlanRows kept %v (%v), want %v", kept, err, c.rows)
			}
			wantPin := pinning(t, c.pinned)
			for _, p := range variants(m) {
				if p == nil {
					continue
				}
				if v, err := p.compiled.Property("ENABLE_CPU_PINNING"); err != nil || v != wantPin {
					t.Errorf("ENABLE_CPU_PINNING %q (%v); want %q", v, err, wantPin)
				}
			}
			for n, p := range m.static {
				if !shapeIs(p.compiled.Inputs()[0].Shape, n) {
					t.Fatalf("inputs: compiled for %d rows %v", n, p.compiled.Inputs())
				}
			}
			if !shapeIs(m.dyn.compiled.Inputs()[0].Shape, -1) {
				t.Fatalf("inputs: dynamic %v", m.dyn.compiled.Inputs())
			}
			h, err := handlers.New("tensor", handlers.Context{Config: am.Config})
			if err != nil {
				t.Fatal(err)
			}
			if err := m.BindHandler(h); err != nil {
				t.Fatal(err)
			}
			row := len(x.Data) / batch
			for _, b := range []struct {
				rows  int
				lone  bool // no other batch runs
				ranOn *pool
			}{
				{batch, true, pick(m.alone, m.static[batch], m.dyn)},
				{3, true, pick(m.alone, m.dyn)},
				{batch, false, pick(m.static[batch], m.dyn)},
				{3, false, pick(m.static[3], m.dyn)},
				{5, false, m.dyn},
			} {
				before := made(m)
				if !b.lone {
					// Another batch is running.
					m.running.Add(1)
				}
				res, err := m.Run([]*handlers.Sample{{Items: b.rows, Tensors: []handlers.Tensor{{DType: torch.Float32, Shape: []int64{int64(b.rows), 3, 224, 224}, Data: x.Data[:b.rows*row]}}}}, nil)
				if !b.lone {
					m.running.Add(-1)
				}
				if err != nil {
					t.Fatal(err)
				}
				// The chosen variant has made its one request (at its first use) and has it back;
				// no other made one.
				for p, n := range before {
					if p == b.ranOn && (p.made != 1 || len(p.free) != 1) || p != b.ranOn && p.made != n {
						t.Errorf("%d rows, alone %v: a variant (chosen: %v) made %d requests, %d free", b.rows, b.lone, p == b.ranOn, p.made, len(p.free))
					}
				}
				got := zootest.F32s(res[0][0].Data)
				var diff, scale float64
				for i := range got {
					diff, scale = math.Max(diff, math.Abs(float64(got[i]-want[i]))), math.Max(scale, math.Abs(float64(want[i])))
				}
				if len(got) != b.rows*1000 || diff > 1e-3*max(scale, 1) {
					t.Errorf("%d rows, alone %v: %d logits, differing from Python's by %g (up to %g)", b.rows, b.lone, len(got), diff, scale)
				}
			}
		})
	}
}

// pinning is the ENABLE_CPU_PINNING a compiled model reports: NO unpinned; pinned, whatever
// OpenVINO's own default is on this machine (it turns pinning off where it cannot pin), since
// "true" leaves the property unset.
func pinning(t *testing.T, pinned bool) string {
	if !pinned {
		return "NO"
	}
	xml := filepath.Join("..", "..", "models", "out", "openvino", "resnet18_ov_int8", "1", "model.xml")
	m, err := ov.Compile(xml, ov.Options{Hint: "LATENCY", Streams: 2, Threads: 2, DynamicBatch: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	v, err := m.Property("ENABLE_CPU_PINNING")
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// pick is the first variant compiled.
func pick(ps ...*pool) *pool {
	for _, p := range ps {
		if p != nil {
			return p
		}
	}
	return nil
}

func made(m *Model) map[*pool]int {
	out := map[*pool]int{}
	for _, p := range variants(m) {
		out[p] = p.made
	}
	return out
}

// variants are m's compiled models.
func variants(m *Model) []*pool {
	var out []*pool
	for _, p := range append([]*pool{m.dyn, m.alone}, slices.Collect(maps.Values(m.static))...) {
		if p != nil {
			out = append(out, p)
		}
	}
	return out
}

func sortedKeys(m map[int64]*pool) []int {
	var out []int
	for n := range m {
		out = append(out, int(n))
	}
	slices.Sort(out)
	return out
}

func shapeIs(s []int64, first int64) bool {
	return len(s) == 4 && s[0] == first && s[1] == 3 && s[2] == 224 && s[3] == 224
}

// reshapeIR is x [1, 4] → Reshape to the constant [1, 4] → y: its batch can be made dynamic
// (a dynamic one may be 1), but not fixed at 8 (8 rows are not one).
const reshapeIR = `<?xml version="1.0"?>
<net name="reshape" version="11">
	<layers>
		<layer id="0" name="x" type="Parameter" version="opset1">
			<data shape="1,4" element_type="f32" />
			<output><port id="0" precision="FP32" names="x"><dim>1</dim><dim>4</dim></port></output>
		</layer>
		<layer id="1" name="shape" type="Const" version="opset1">
			<data element_type="i64" shape="2" offset="0" size="16" />
			<output><port id="0" precision="I64"><dim>2</dim></port></output>
		</layer>
		<layer id="2" name="reshape" type="Reshape" version="opset1">
			<data special_zero="false" />
			<input><port id="0" precision="FP32"><dim>1</dim><dim>4</dim></port><port id="1" precision="I64"><dim>2</dim></port></input>
			<output><port id="2" precision="FP32" names="y"><dim>1</dim><dim>4</dim></port></output>
		</layer>
		<layer id="3" name="y" type="Result" version="opset1">
			<input><port id="0" precision="FP32"><dim>1</dim><dim>4</dim></port></input>
		</layer>
	</layers>
	<edges>
		<edge from-layer="0" from-port="0" to-layer="2" to-port="0" />
		<edge from-layer="1" from-port="0" to-layer="2" to-port="1" />
		<edge from-layer="2" from-port="2" to-layer="3" to-port="0" />
	</edges>
</net>
`

// A graph that compiles with a dynamic batch but not for the batch size loads without the
// full-batch model and answers on the dynamic one.
func TestNoFullBatchModel(t *testing.T) {
	dir := t.TempDir()
	bin := make([]byte, 16)
	bin[0], bin[8] = 1, 4 // int64 little-endian 1, 4
	for name, b := range map[string][]byte{"model.xml": []byte(reshapeIR), "model.bin": bin,
		"model-config.toml": []byte("handler = \"tensor\"\nserialized_file = \"model.xml\"\nbatch_size = 8\n")} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	am, err := archive.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer am.Close()
	s := core.ModelSettings{BatchSize: 8, MinWorkers: 1, MaxWorkers: 1, Device: "cpu"}
	cm, err := (&Backend{}).Load(core.LoadRequest{Name: "m", Version: "1", Archive: am, Settings: s, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	m := cm.(*Model)
	defer m.Close()
	if len(m.static) > 0 || m.dyn == nil {
		t.Fatalf("fixed-size models %v, dynamic %v", sortedKeys(m.static), m.dyn != nil)
	}
	h, err := handlers.New("tensor", handlers.Context{Config: am.Config})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.BindHandler(h); err != nil {
		t.Fatal(err)
	}
	x := []byte{0, 0, 0x80, 0x3f, 0, 0, 0, 0x40, 0, 0, 0x40, 0x40, 0, 0, 0x80, 0x40} // 1, 2, 3, 4
	res, err := m.Run([]*handlers.Sample{{Items: 1, Tensors: []handlers.Tensor{{DType: torch.Float32, Shape: []int64{1, 4}, Data: x}}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := zootest.F32s(res[0][0].Data); len(got) != 4 || got[0] != 1 || got[3] != 4 {
		t.Errorf("y = %v", got)
	}
}
