package kserve_test

import (
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/internal/zootest"
	"github.com/torchd/torchd/lifecycle"
	pb "github.com/torchd/torchd/proto/inference"
)

// A two-input BERT-style model (models/hfbert.py: a Hugging Face BertForSequenceClassification
// with random weights) served from a Triton repository as TorchScript and as a plain
// AOTInductor package, its encoder's tuple and dict outputs, Triton's classification
// extension, and a plain .pt2 archive: every answer compared with Python's.

const tritonBERT = `
name: "NAME"
platform: "PLATFORM"
max_batch_size: 8
input [
  { name: "input_ids" data_type: TYPE_INT64 dims: [ -1 ] },
  { name: "attention_mask" data_type: TYPE_INT64 dims: [ -1 ] }
]
output [ { name: "logits" data_type: TYPE_FP32 dims: [ 3 ] label_filename: "labels.txt" } ]
dynamic_batching { max_queue_delay_microseconds: 20000 }
instance_group [ { count: 1 kind: KIND_CPU } ]
`

const tritonEncoder = `
name: "encoder"
platform: "pytorch_libtorch"
max_batch_size: 8
input [
  { name: "input_ids" data_type: TYPE_INT64 dims: [ -1 ] },
  { name: "attention_mask" data_type: TYPE_INT64 dims: [ -1 ] }
]
output [
  { name: "last_hidden_state" data_type: TYPE_FP32 dims: [ -1, 32 ] },
  { name: "pooler_output" data_type: TYPE_FP32 dims: [ 32 ] }
]
dynamic_batching { max_queue_delay_microseconds: 20000 }
`

type bertRef struct {
	Text   string      `json:"text"`
	IDs    []int64     `json:"ids"`
	Logits []float64   `json:"logits"`
	Hidden [][]float64 `json:"last_hidden_state"`
	Pooler []float64   `json:"pooler_output"`
}

var hfbertDir = filepath.Join(zooDir, "hfbert")

func bertRefs(t testing.TB) []bertRef {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(hfbertDir, "refs.json"))
	if err != nil {
		t.Skipf("%v: run `make models` first", err)
	}
	var r struct{ Items []bertRef }
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return r.Items
}

// bertV2 is a v2 request of the texts' ids, padded to the longest with their masks.
func bertV2(refs []bertRef, outputs ...map[string]any) []byte {
	width := 0
	for _, r := range refs {
		width = max(width, len(r.IDs))
	}
	var ids, mask []int64
	for _, r := range refs {
		for j := range width {
			if j < len(r.IDs) {
				ids, mask = append(ids, r.IDs[j]), append(mask, 1)
			} else {
				ids, mask = append(ids, 0), append(mask, 0)
			}
		}
	}
	shape := []int{len(refs), width}
	req := map[string]any{"inputs": []map[string]any{
		{"name": "input_ids", "datatype": "INT64", "shape": shape, "data": ids},
		{"name": "attention_mask", "datatype": "INT64", "shape": shape, "data": mask},
	}}
	if outputs != nil {
		req["outputs"] = outputs
	}
	b, _ := json.Marshal(req)
	return b
}

type v2Outputs struct {
	Outputs []struct {
		Name     string          `json:"name"`
		Datatype string          `json:"datatype"`
		Shape    []int64         `json:"shape"`
		Data     json.RawMessage `json:"data"`
	} `json:"outputs"`
}

func (o v2Outputs) floats(t testing.TB, name string) ([]float64, []int64) {
	t.Helper()
	for _, out := range o.Outputs {
		if out.Name == name {
			var f []float64
			if err := json.Unmarshal(out.Data, &f); err != nil {
				t.Fatal(err)
			}
			return f, out.Shape
		}
	}
	t.Fatalf("no output %q in %+v", name, o)
	return nil, nil
}

func maxAbs(a, b []float64) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	d := 0.0
	for i := range a {
		d = math.Max(d, math.Abs(a[i]-b[i]))
	}
	return d
}

// The TorchScript model and its AOTInductor package from a Triton repository, alone and
// batched by the server, over REST and gRPC; the classification extension; statistics of a
// 2-row batch; the encoder's tuple and dict outputs.
func TestTritonBERT(t *testing.T) {
	refs := bertRefs(t)
	repo := t.TempDir()
	labels := "negative\nneutral\npositive\n"
	for _, m := range []struct{ name, platform, file string }{
		{"bert_ts", "pytorch_libtorch", "model.pt"},
		{"bert_aoti", "torch_aoti", "model.pt2"},
		{"bert_exported", "torch_aoti", "exported.pt2"},
	} {
		cfg := strings.NewReplacer("NAME", m.name, "PLATFORM", m.platform).Replace(tritonBERT)
		zootest.RepoModel(t, zooDir, repo, m.name, cfg, "hfbert", m.file, "1")
		if m.file == "exported.pt2" {
			os.Rename(filepath.Join(repo, m.name, "1", m.file), filepath.Join(repo, m.name, "1", "model.pt2"))
		}
		if err := os.WriteFile(filepath.Join(repo, m.name, "labels.txt"), []byte(labels), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	zootest.RepoModel(t, zooDir, repo, "encoder", tritonEncoder, "hfbert", "encoder.pt", "1")
	os.Rename(filepath.Join(repo, "encoder", "1", "encoder.pt"), filepath.Join(repo, "encoder", "1", "model.pt"))
	zootest.RepoModel(t, zooDir, repo, "encoder_dict", strings.Replace(tritonEncoder, `"encoder"`, `"encoder_dict"`, 1), "hfbert", "encoder_dict.pt", "1")
	os.Rename(filepath.Join(repo, "encoder_dict", "1", "encoder_dict.pt"), filepath.Join(repo, "encoder_dict", "1", "model.pt"))

	s := newServer(t, serverOptions{repository: repo, controlMode: lifecycle.ControlNone})
	idx := s.settled()
	for _, m := range []string{"bert_ts 1", "bert_aoti 1", "encoder 1", "encoder_dict 1"} {
		if idx[m] != "READY" {
			t.Fatalf("%s: %q (index %v)", m, idx[m], idx)
		}
	}
	if got := idx["bert_exported 1"]; !strings.Contains(got, "exported program (torch.export.save), not a compiled package: compile it with torch._inductor.aoti_compile_and_package") {
		t.Errorf("an exported program: %q", got)
	}

	// Each text alone, and all of them at once from concurrent clients (batched and padded
	// by the server), over REST; answers equal Python's for the text alone.
	for _, model := range []string{"bert_ts", "bert_aoti"} {
		var wg sync.WaitGroup
		errs := make(chan string, len(refs))
		for _, r := range refs {
			wg.Go(func() {
				var out v2Outputs
				resp := s.do("POST", "/v2/models/"+model+"/infer", bertV2([]bertRef{r}))
				if resp.status != 200 {
					errs <- fmt.Sprintf("%s %q: %d %s", model, r.Text, resp.status, resp.body)
					return
				}
				if err := json.Unmarshal(resp.body, &out); err != nil {
					errs <- err.Error()
					return
				}
				got, shape := out.floats(t, "logits")
				if d := maxAbs(got, r.Logits); d > 1e-4 || fmt.Sprint(shape) != "[1 3]" {
					errs <- fmt.Sprintf("%s %q: logits %v %v, Python %v (diff %.3g)", model, r.Text, shape, got, r.Logits, d)
				}
			})
		}
		wg.Wait()
		close(errs)
		for e := range errs {
			t.Error(e)
		}
	}

	// gRPC: two texts in one request (padded by the client), equal to Python's alone.
	c := s.grpcClient()
	for _, model := range []string{"bert_ts", "bert_aoti"} {
		pair := refs[1:3]
		width := max(len(pair[0].IDs), len(pair[1].IDs))
		req := &pb.ModelInferRequest{ModelName: model}
		var ids, mask []int64
		for _, r := range pair {
			for j := range width {
				if j < len(r.IDs) {
					ids, mask = append(ids, r.IDs[j]), append(mask, 1)
				} else {
					ids, mask = append(ids, 0), append(mask, 0)
				}
			}
		}
		for name, data := range map[string][]int64{"input_ids": ids, "attention_mask": mask} {
			req.Inputs = append(req.Inputs, &pb.ModelInferRequest_InferInputTensor{Name: name, Datatype: "INT64", Shape: []int64{2, int64(width)},
				Contents: &pb.InferTensorContents{Int64Contents: data}})
		}
		resp, err := c.ModelInfer(callCtx(t), req)
		if err != nil {
			t.Fatalf("%s over gRPC: %v", model, err)
		}
		var got []float64
		for _, f := range resp.GetOutputs()[0].GetContents().GetFp32Contents() {
			got = append(got, float64(f))
		}
		if resp.GetOutputs()[0].GetName() != "logits" || maxAbs(got, slices.Concat(pair[0].Logits, pair[1].Logits)) > 1e-4 {
			t.Errorf("%s over gRPC: %s %v, Python %v %v", model, resp.GetOutputs()[0].GetName(), got, pair[0].Logits, pair[1].Logits)
		}
	}

	// Triton's classification extension: the top 2 of each row as "value:index:label".
	label := strings.Split(strings.TrimSpace(labels), "\n")
	resp := s.do("POST", "/v2/models/bert_ts/infer",
		bertV2(refs[:2], map[string]any{"name": "logits", "parameters": map[string]any{"classification": 2}}))
	var cls struct {
		Outputs []struct {
			Name, Datatype string
			Shape          []int64
			Data           []string
		}
	}
	resp.json(t, &cls)
	if len(cls.Outputs) != 1 || cls.Outputs[0].Datatype != "BYTES" || fmt.Sprint(cls.Outputs[0].Shape) != "[2 2]" {
		t.Fatalf("classification: %s", resp.body)
	}
	for row, r := range refs[:2] {
		order := []int{0, 1, 2}
		slices.SortStableFunc(order, func(a, b int) int { return -cmpFloat(r.Logits[a], r.Logits[b]) })
		for k := range 2 {
			parts := strings.SplitN(cls.Outputs[0].Data[row*2+k], ":", 3)
			v, _ := strconv.ParseFloat(parts[0], 64)
			if len(parts) != 3 || parts[1] != strconv.Itoa(order[k]) || parts[2] != label[order[k]] || math.Abs(v-r.Logits[order[k]]) > 1e-4 || len(strings.Split(parts[0], ".")[1]) != 6 {
				t.Errorf("row %d class %d: %q, want %.6f:%d:%s", row, k, cls.Outputs[0].Data[row*2+k], r.Logits[order[k]], order[k], label[order[k]])
			}
		}
	}
	for _, bad := range []any{0, -1, 2.5, "two"} {
		r := s.do("POST", "/v2/models/bert_ts/infer",
			bertV2(refs[:1], map[string]any{"name": "logits", "parameters": map[string]any{"classification": bad}}))
		if r.status != 400 || !strings.Contains(string(r.body), "parameter classification must be a positive integer") {
			t.Errorf("classification %v: %d %s", bad, r.status, r.body)
		}
	}

	// The 2-row request above ran alone: statistics count it as a batch of 2 rows.
	var stats struct {
		ModelStats []struct {
			BatchStats []struct {
				BatchSize uint64 `json:"batch_size"`
			} `json:"batch_stats"`
		} `json:"model_stats"`
	}
	s.do("GET", "/v2/models/bert_ts/versions/1/stats", nil).json(t, &stats)
	sizes := []uint64{}
	for _, b := range stats.ModelStats[0].BatchStats {
		sizes = append(sizes, b.BatchSize)
	}
	if !slices.Contains(sizes, 2) {
		t.Errorf("batch sizes %v, want 2 among them (the 2-row requests)", sizes)
	}

	// The encoder's tuple and dict outputs come back named, the sequence output cut back to
	// each text's own length after the server padded texts of different lengths together.
	for _, model := range []string{"encoder", "encoder_dict"} {
		var wg sync.WaitGroup
		for _, r := range refs {
			wg.Go(func() {
				resp := s.do("POST", "/v2/models/"+model+"/infer", bertV2([]bertRef{r}))
				if resp.status != 200 {
					t.Errorf("%s %q: %d %s", model, r.Text, resp.status, resp.body)
					return
				}
				var out v2Outputs
				if err := json.Unmarshal(resp.body, &out); err != nil {
					t.Error(err)
					return
				}
				hidden, shape := out.floats(t, "last_hidden_state")
				pooler, _ := out.floats(t, "pooler_output")
				if fmt.Sprint(shape) != fmt.Sprint([]int64{1, int64(len(r.IDs)), 32}) || maxAbs(hidden, slices.Concat(r.Hidden...)) > 1e-4 || maxAbs(pooler, r.Pooler) > 1e-4 {
					t.Errorf("%s %q: last_hidden_state %v, diff %.3g; pooler diff %.3g", model, r.Text, shape, maxAbs(hidden, slices.Concat(r.Hidden...)), maxAbs(pooler, r.Pooler))
				}
			})
		}
		wg.Wait()
	}
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// A plain AOTInductor package (no torchd metadata) in an archive whose config declares the
// inputs, served through the TorchServe API's tensor handler; describe says runtime aoti.
func TestPlainPackageArchive(t *testing.T) {
	refs := bertRefs(t)
	s := newServer(t, serverOptions{})
	store := t.TempDir()
	cfg := filepath.Join(t.TempDir(), "model-config.toml")
	const toml = `handler = "tensor"
batch_size = 4
max_batch_delay = 20

[[inputs]]
name = "input_ids"
dtype = "int64"
shape = [-1, -1]

[[inputs]]
name = "attention_mask"
dtype = "int64"
shape = [-1, -1]

[[outputs]]
name = "logits"
dtype = "float32"
shape = [-1, 3]
`
	if err := os.WriteFile(cfg, []byte(toml), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := archive.Write(archive.WriteOptions{ModelName: "bert_plain", SerializedFile: filepath.Join(hfbertDir, "model.pt2"),
		ConfigFile: cfg, ExportPath: store, Format: archive.FormatNoArchive, Force: true})
	if err != nil {
		t.Fatal(err)
	}
	s.register("url=" + url.QueryEscape(out) + "&initial_workers=1&synchronous=true")
	var wg sync.WaitGroup
	for _, r := range refs {
		wg.Go(func() {
			mask := make([]int64, len(r.IDs))
			for i := range mask {
				mask[i] = 1
			}
			body, _ := json.Marshal(map[string]any{"input_ids": [][]int64{r.IDs}, "attention_mask": [][]int64{mask}})
			resp := s.do("POST", "/predictions/bert_plain", body)
			var got struct {
				Shape []int64
				Data  []float64
			}
			if resp.status != 200 || json.Unmarshal(resp.body, &got) != nil {
				t.Errorf("%q: %d %s", r.Text, resp.status, resp.body)
				return
			}
			if d := maxAbs(got.Data, r.Logits); d > 1e-4 {
				t.Errorf("%q: %v, Python %v", r.Text, got.Data, r.Logits)
			}
		})
	}
	wg.Wait()
	var desc []struct {
		Runtime string `json:"runtime"`
	}
	s.doMgmt("GET", "/models/bert_plain", nil).json(t, &desc)
	if len(desc) != 1 || desc[0].Runtime != "aoti" {
		t.Errorf("describe: %+v, want runtime aoti", desc)
	}
	// An exported program in an archive: refused with the step to take.
	_, err = archive.Write(archive.WriteOptions{ModelName: "bert_exported", SerializedFile: filepath.Join(hfbertDir, "exported.pt2"),
		ConfigFile: cfg, ExportPath: store, Format: archive.FormatNoArchive, Force: true})
	if err == nil || !strings.Contains(err.Error(), "compile it with torch._inductor.aoti_compile_and_package") {
		t.Errorf("archiving an exported program: %v", err)
	}
}

// A TorchScript model of two inputs registered without declaring them: a v2 request that
// names them after forward's arguments reaches forward in its order, whatever the request's.
func TestUndeclaredInputsByName(t *testing.T) {
	refs := bertRefs(t)
	s := newServer(t, serverOptions{})
	store := t.TempDir()
	cfg := filepath.Join(t.TempDir(), "model-config.toml")
	if err := os.WriteFile(cfg, []byte("handler = \"tensor\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := archive.Write(archive.WriteOptions{ModelName: "bert_undeclared", SerializedFile: filepath.Join(hfbertDir, "model.pt"),
		ConfigFile: cfg, ExportPath: store, Format: archive.FormatNoArchive, Force: true})
	if err != nil {
		t.Fatal(err)
	}
	s.register("url=" + url.QueryEscape(out) + "&initial_workers=1&synchronous=true")
	r := refs[2]
	mask := make([]int64, len(r.IDs))
	for i := range mask {
		mask[i] = 1
	}
	shape := []int{1, len(r.IDs)}
	body, _ := json.Marshal(map[string]any{"inputs": []map[string]any{
		{"name": "attention_mask", "datatype": "INT64", "shape": shape, "data": mask},
		{"name": "input_ids", "datatype": "INT64", "shape": shape, "data": r.IDs},
	}})
	resp := s.do("POST", "/v2/models/bert_undeclared/infer", body)
	var o v2Outputs
	resp.json(t, &o)
	if got, _ := o.floats(t, "output__0"); maxAbs(got, r.Logits) > 1e-4 {
		t.Errorf("inputs by name: %v, Python %v", got, r.Logits)
	}
}
