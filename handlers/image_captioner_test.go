package handlers_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"image/png"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/torchd/torchd/errkind"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/handlers"
	"github.com/torchd/torchd/torch"
)

// The captioner that models/captioner.py trains, and its archive config.
var (
	captionerDir    = filepath.Join("..", "models", "out", "captioner")
	captionerConfig = filepath.Join("..", "models", "configs", "captioner.toml")
)

func captionerContext(t testing.TB) handlers.Context {
	t.Helper()
	return captionerContextOf(t, captionerConfig)
}

// captionerContextOf is the captioner's handler context with the config file config.
func captionerContextOf(t testing.TB, config string) handlers.Context {
	t.Helper()
	if _, err := os.Stat(filepath.Join(captionerDir, "model.pt")); err != nil {
		t.Fatalf("%v: run `make models` first", err)
	}
	b, err := os.ReadFile(config)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := archive.ParseModelConfig(archive.ConfigTOML, b)
	if err != nil {
		t.Fatal(err)
	}
	return handlers.Context{Config: cfg, Dir: captionerDir}
}

func newCaptioner(t testing.TB) handlers.Handler {
	t.Helper()
	h, err := handlers.New("image_captioner", captionerContext(t))
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func pngRequest(images ...[]byte) *handlers.Request {
	r := &handlers.Request{Header: func(string) string { return "" }}
	for i, b := range images {
		r.Inputs = append(r.Inputs, handlers.Payload{Name: "image" + string(rune('0'+i)), ContentType: "image/png", Data: b})
	}
	return r
}

// heldOutScenes returns the held-out PNGs and their captions, in file name order.
func heldOutScenes(t testing.TB) ([][]byte, []string) {
	t.Helper()
	var want map[string]string
	b, err := os.ReadFile(filepath.Join(captionerDir, "heldout", "captions.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	var imgs [][]byte
	var caps []string
	for _, name := range slices.Sorted(maps.Keys(want)) {
		img, err := os.ReadFile(filepath.Join(captionerDir, "heldout", name))
		if err != nil {
			t.Fatal(err)
		}
		imgs = append(imgs, img)
		caps = append(caps, want[name])
	}
	return imgs, caps
}

func captionOf(t testing.TB, resp *handlers.Response) string {
	t.Helper()
	var c struct{ Caption string }
	if err := json.Unmarshal(resp.Body, &c); err != nil {
		t.Fatalf("%s: %v", resp.Body, err)
	}
	return c.Caption
}

// The handler's tensor is exactly what the training script fed the model: the held-out PNGs
// are the input size, so pixels/255 then (x - 0.5) / 0.5 and nothing else.
func TestCaptionerPreprocessIsTheTrainingNormalization(t *testing.T) {
	h := newCaptioner(t)
	b, err := os.ReadFile(filepath.Join(captionerDir, "sample.png"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := h.Preprocess(pngRequest(b))
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(s.Tensors[0].Shape, []int64{1, 3, 64, 64}) || s.Tensors[0].DType != torch.Float32 {
		t.Fatalf("tensor %v %v", s.Tensors[0].DType, s.Tensors[0].Shape)
	}
	data := s.Tensors[0].Data
	for y := range 64 {
		for x := range 64 {
			r, g, bl, _ := img.At(x, y).RGBA()
			for c, v := range []uint32{r >> 8, g >> 8, bl >> 8} {
				want := (float32(v)/255 - 0.5) / 0.5
				got := math.Float32frombits(binary.LittleEndian.Uint32(data[4*(c*64*64+y*64+x):]))
				if got != want {
					t.Fatalf("pixel (%d,%d) channel %d: %v, want %v", x, y, c, got, want)
				}
			}
		}
	}
}

// Captions the held-out scenes in batches of mixed requests (one holding three images) and
// one by one: the captions are the same, and at least 90% are exactly right.
func TestCaptionerHeldOutBatchedEqualsAlone(t *testing.T) {
	h := newCaptioner(t)
	m, err := torch.Load(filepath.Join(captionerDir, "model.pt"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	imgs, want := heldOutScenes(t)

	alone := make([]string, len(imgs))
	for i, img := range imgs {
		s, err := h.Preprocess(pngRequest(img))
		if err != nil {
			t.Fatal(err)
		}
		out, err := handlers.Infer(h, m, []*handlers.Sample{s})
		if err != nil {
			t.Fatal(err)
		}
		resp, err := h.Postprocess(s, out[0])
		if err != nil {
			t.Fatal(err)
		}
		alone[i] = captionOf(t, resp)
	}

	var batched []string
	for start := 0; start < len(imgs); start += 16 {
		chunk := imgs[start:min(start+16, len(imgs))]
		// The first request of each batch carries three images, the others one.
		var batch []*handlers.Sample
		for i := 0; i < len(chunk); {
			n := 1
			if i == 0 {
				n = min(3, len(chunk))
			}
			s, err := h.Preprocess(pngRequest(chunk[i : i+n]...))
			if err != nil {
				t.Fatal(err)
			}
			batch = append(batch, s)
			i += n
		}
		outs, err := handlers.Infer(h, m, batch)
		if err != nil {
			t.Fatal(err)
		}
		for k, s := range batch {
			resp, err := h.Postprocess(s, outs[k])
			if err != nil {
				t.Fatal(err)
			}
			if s.Items == 1 {
				batched = append(batched, captionOf(t, resp))
				continue
			}
			var caps []struct{ Caption string }
			if err := json.Unmarshal(resp.Body, &caps); err != nil || len(caps) != s.Items {
				t.Fatalf("%d images in one request: %s (%v)", s.Items, resp.Body, err)
			}
			for _, c := range caps {
				batched = append(batched, c.Caption)
			}
		}
	}

	right := 0
	for i := range imgs {
		if batched[i] != alone[i] {
			t.Errorf("scene %d: batched %q, alone %q", i, batched[i], alone[i])
		}
		if alone[i] == want[i] {
			right++
		}
	}
	acc := float64(right) / float64(len(imgs))
	t.Logf("held-out exact match %.4f over %d scenes", acc, len(imgs))
	if acc < 0.9 {
		t.Fatalf("exact match %.4f < 0.90", acc)
	}
}

// The captioner with its encoder from encoder.pt2 (models/configs/captioner_pt2.toml) gives
// the token ids TorchScript's generate gives, for one batch of all held-out scenes (five a
// request: more rows than the package was exported for, so it runs in parts) and for one
// scene alone. The handler refuses to run a model that was not bound to the package.
func TestCaptionerEncoderPackageEqualsTorchScript(t *testing.T) {
	plain := newCaptioner(t)
	h, err := handlers.New("image_captioner", captionerContextOf(t, filepath.Join("..", "models", "configs", "captioner_pt2.toml")))
	if err != nil {
		t.Fatal(err)
	}
	load := func() *torch.Module {
		m, err := torch.Load(filepath.Join(captionerDir, "model.pt"))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	ts := load()
	defer ts.Close()
	m := load()
	if _, err := handlers.Infer(h, m, nil); err == nil || !strings.Contains(err.Error(), "not bound") {
		t.Errorf("an unbound model: %v, want an error", err)
	}
	bound, err := handlers.Bind(h, m, 1)
	if err != nil {
		m.Close()
		t.Fatal(err)
	}
	defer bound.Close()

	imgs, _ := heldOutScenes(t)
	var batch []*handlers.Sample
	for i := 0; i < len(imgs); i += 5 {
		s, err := h.Preprocess(pngRequest(imgs[i:min(i+5, len(imgs))]...))
		if err != nil {
			t.Fatal(err)
		}
		batch = append(batch, s)
	}
	for _, b := range [][]*handlers.Sample{batch, batch[:1]} {
		got, err := handlers.Infer(h, bound, b)
		if err != nil {
			t.Fatal(err)
		}
		want, err := handlers.Infer(plain, ts, b)
		if err != nil {
			t.Fatal(err)
		}
		for i := range b {
			if !bytes.Equal(got[i][0].Data, want[i][0].Data) || !slices.Equal(got[i][0].Shape, want[i][0].Shape) {
				t.Errorf("batch of %d requests, request %d: token ids %v differ from TorchScript's %v", len(b), i, got[i][0].Shape, want[i][0].Shape)
			}
		}
	}
}

func TestCaptionerBadImageIs400(t *testing.T) {
	h := newCaptioner(t)
	for name, body := range map[string][]byte{
		"truncated PNG": []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"),
		"not an image":  []byte("hello"),
	} {
		_, err := h.Preprocess(pngRequest(body))
		if err == nil || !errors.Is(err, errkind.BadInput) {
			t.Errorf("%s: %v, want a 400 error", name, err)
		}
	}
}

// ids builds a model output of int64 rows.
func ids(rows ...[]int64) []handlers.Tensor {
	var b []byte
	for _, r := range rows {
		for _, v := range r {
			b = binary.LittleEndian.AppendUint64(b, uint64(v))
		}
	}
	return []handlers.Tensor{{DType: torch.Int64, Shape: []int64{int64(len(rows)), int64(len(rows[0]))}, Data: b}}
}

// vocab.json: 0 <pad>, 1 <bos>, 2 <eos>, 3 a, 4 red, ... 8 circle, 9 square, 11 above.
func TestCaptionerPostprocessStopsAtEnd(t *testing.T) {
	h := newCaptioner(t)
	for _, c := range []struct {
		row  []int64
		want string
	}{
		{[]int64{3, 4, 8, 11, 3, 6, 9, 2, 0, 0}, "a red circle above a blue square"},
		{[]int64{1, 3, 4, 8, 2, 9, 9, 9}, "a red circle"}, // BOS skipped, nothing after EOS
		{[]int64{3, 0, 4, 8}, "a red circle"},             // no EOS within max_length
		{[]int64{2, 3, 4}, ""},
	} {
		resp, err := h.Postprocess(&handlers.Sample{Items: 1}, ids(c.row))
		if err != nil {
			t.Fatal(err)
		}
		if got := captionOf(t, resp); got != c.want {
			t.Errorf("%v: %q, want %q", c.row, got, c.want)
		}
	}

	resp, err := h.Postprocess(&handlers.Sample{Items: 2}, ids([]int64{3, 4, 8, 2}, []int64{3, 6, 9, 2}))
	if err != nil {
		t.Fatal(err)
	}
	if want := "[\n  {\n    \"caption\": \"a red circle\"\n  },\n  {\n    \"caption\": \"a blue square\"\n  }\n]\n"; string(resp.Body) != want {
		t.Errorf("two images: %q, want %q", resp.Body, want)
	}

	if _, err := h.Postprocess(&handlers.Sample{Items: 1}, ids([]int64{3, 99, 2})); err == nil || !strings.Contains(err.Error(), "token id 99") {
		t.Errorf("out-of-range id: %v", err)
	}
	if _, err := h.Postprocess(&handlers.Sample{Items: 1}, []handlers.Tensor{{DType: torch.Float32, Shape: []int64{1, 2}, Data: make([]byte, 8)}}); err == nil {
		t.Error("float32 output accepted")
	}
}

// Configuration mistakes fail at construction, naming the option.
func TestCaptionerOptions(t *testing.T) {
	base := captionerContext(t)
	dir := t.TempDir()
	write := func(name, s string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("vocab.json", `{"itos": ["<pad>", "<bos>", "<eos>", "hi"], "pad": 0, "bos": 1, "eos": 2}`)
	write("no_eos.json", `{"itos": ["<pad>", "<bos>", "hi"], "pad": 0, "bos": 1}`)
	write("eos_out.json", `{"itos": ["<pad>", "<bos>", "hi"], "pad": 0, "bos": 1, "eos": 3}`)
	write("bad.json", `["<pad>"]`)

	for _, c := range []struct {
		name string
		set  map[string]any
		want string
	}{
		{"ok", nil, ""},
		{"no width", map[string]any{"width": nil}, "width and height"},
		{"width not int", map[string]any{"width": "64"}, "options.width"},
		{"max_length 0", map[string]any{"max_length": int64(0)}, "max_length"},
		{"mean of 1", map[string]any{"mean": []any{0.5}}, "mean and std"},
		{"missing vocab", map[string]any{"vocab": "nope.json"}, `option vocab: the archive has no file "nope.json"`},
		{"vocab outside", map[string]any{"vocab": "../vocab.json"}, "option vocab"},
		{"vocab absolute", map[string]any{"vocab": filepath.Join(dir, "vocab.json")}, "option vocab"},
		{"no eos", map[string]any{"vocab": "no_eos.json"}, `"eos"`},
		{"eos out of range", map[string]any{"vocab": "eos_out.json"}, `"eos"`},
		{"not an object", map[string]any{"vocab": "bad.json"}, "bad.json"},
		{"input size differs", map[string]any{"width": int64(32)}, "[-1 3 64 32]"},
		{"missing encoder", map[string]any{"encoder": "encoder.pt2"}, "option encoder"},
		{"encoder outside", map[string]any{"encoder": "../encoder.pt2"}, "option encoder"},
		{"encoder not a string", map[string]any{"encoder": int64(1)}, "options.encoder"},
	} {
		ctx := base
		ctx.Dir = dir
		ctx.Config.Options = maps.Clone(base.Config.Options)
		for k, v := range c.set {
			if v == nil {
				delete(ctx.Config.Options, k)
			} else {
				ctx.Config.Options[k] = v
			}
		}
		_, err := handlers.New("image_captioner", ctx)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want an error containing %q", c.name, err, c.want)
		}
	}
}
