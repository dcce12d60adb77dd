package handlers

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/torchd/torchd/errkind"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/internal/tolerance"
	"github.com/torchd/torchd/torch"
)

// textZoo is what models/textcls.py builds.
var textZoo = filepath.Join("..", "models", "out", "textcls")

// newTestTextClassifier builds the handler as the daemon does for the textcls archive, from
// models/configs/textcls.toml and models/out/textcls.
func newTestTextClassifier(t testing.TB, options map[string]any) *TextClassifier {
	t.Helper()
	if _, err := os.Stat(filepath.Join(textZoo, "model.pt")); err != nil {
		t.Fatalf("%v: run `make models` first", err)
	}
	data, err := os.ReadFile(filepath.Join("..", "models", "configs", "textcls.toml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := archive.ParseModelConfig(archive.ConfigTOML, data)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range options {
		cfg.Options[k] = v
	}
	labelData, err := os.ReadFile(filepath.Join(textZoo, "index_to_name.json"))
	if err != nil {
		t.Fatal(err)
	}
	labels, err := archive.ParseLabels("index_to_name.json", labelData)
	if err != nil {
		t.Fatal(err)
	}
	h, err := New(cfg.Handler, Context{Config: cfg, Dir: textZoo, Labels: labels})
	if err != nil {
		t.Fatal(err)
	}
	return h.(*TextClassifier)
}

type textHeldOut struct {
	Items []struct {
		Text  string  `json:"text"`
		Label string  `json:"label"`
		IDs   []int64 `json:"ids"`
	} `json:"items"`
}

func readTextHeldOut(t testing.TB) textHeldOut {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(textZoo, "heldout.json"))
	if err != nil {
		t.Fatal(err)
	}
	var h textHeldOut
	if err := json.Unmarshal(b, &h); err != nil {
		t.Fatal(err)
	}
	return h
}

func textRequest(inputs ...Payload) *Request {
	return &Request{Inputs: inputs, Header: func(string) string { return "" }}
}

func textBody(contentType, data string) Payload {
	return Payload{Name: "body", ContentType: contentType, Data: []byte(data)}
}

func TestTextClassifierPreprocess(t *testing.T) {
	tc := newTestTextClassifier(t, nil)
	for _, c := range []struct {
		name  string
		req   *Request
		texts []string
	}{
		{"raw body", textRequest(textBody("text/plain", "The movie was great!")), []string{"The movie was great!"}},
		{"raw body without a content type", textRequest(textBody("", "not bad at all")), []string{"not bad at all"}},
		{"JSON string", textRequest(textBody("application/json", `"what a film"`)), []string{"what a film"}},
		{"JSON text", textRequest(textBody("application/json", `{"text": "caf\u00e9 \u2615"}`)), []string{"café ☕"}},
		{"JSON-looking text/plain is text, as TorchServe takes it", textRequest(textBody("text/plain", `{"data": "boring"}`)), []string{`{"data": "boring"}`}},
		{"JSON data, +json", textRequest(textBody("application/vnd.api+json; charset=utf-8", `{"data": "boring"}`)), []string{"boring"}},
		{"JSON list", textRequest(textBody("application/json", `["good", "bad", {"text": "ok"}]`)), []string{"good", "bad", "ok"}},
		{"JSON data list", textRequest(textBody("application/json", `{"data": ["good", "bad"]}`)), []string{"good", "bad"}},
		{"text that is not JSON", textRequest(textBody("text/plain", `[spoiler] great`)), []string{"[spoiler] great"}},
		{"multipart fields", textRequest(Payload{Name: "a", ContentType: "text/plain", Data: []byte("good")},
			Payload{Name: "b", ContentType: "text/plain", Data: []byte("bad")}), []string{"good", "bad"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := tc.Preprocess(c.req)
			if err != nil {
				t.Fatal(err)
			}
			if s.Items != len(c.texts) {
				t.Fatalf("%d items, want %d", s.Items, len(c.texts))
			}
			for i, text := range c.texts {
				if got, want := s.State.(textState).ids[i], tc.tok.Encode(text); !slices.Equal(got, want) {
					t.Errorf("text %d: ids %v, want those of %q: %v", i, got, text, want)
				}
			}
		})
	}
}

func TestTextClassifierRejectsBadInput(t *testing.T) {
	tc := newTestTextClassifier(t, nil)
	for _, c := range []struct {
		name string
		req  *Request
		msg  string
	}{
		{"invalid UTF-8", textRequest(textBody("text/plain", "caf\xe9")), "UTF-8"},
		{"invalid UTF-8 in JSON", textRequest(textBody("application/json", "{\"text\": \"caf\xe9\"}")), "UTF-8"},
		{"empty body", textRequest(textBody("text/plain", "")), "empty"},
		{"whitespace", textRequest(textBody("text/plain", " \n\t")), "empty"},
		{"no inputs", textRequest(), "no text"},
		{"empty JSON string", textRequest(textBody("application/json", `{"text": ""}`)), "empty"},
		{"an empty text of several", textRequest(textBody("application/json", `["good", " "]`)), "text 1 is empty"},
		{"empty JSON list", textRequest(textBody("application/json", `[]`)), "no text"},
		{"number", textRequest(textBody("application/json", `{"text": 3}`)), "strings"},
		{"unknown key", textRequest(textBody("application/json", `{"sentence": "good"}`)), `"text"`},
		{"invalid JSON", textRequest(textBody("application/json", `{"text": `)), "invalid JSON"},
		{"too deep", textRequest(textBody("application/json", `[[["good"]]]`)), "too deep"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := tc.Preprocess(c.req)
			if err == nil || !errors.Is(err, errkind.BadInput) || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("error %v, want a bad input mentioning %q", err, c.msg)
			}
		})
	}
}

func TestTextClassifierOptions(t *testing.T) {
	for _, c := range []struct {
		name    string
		options map[string]any
		msg     string
	}{
		{"vocab outside the archive", map[string]any{"vocab": "../textcls/vocab.txt"}, "option vocab"},
		{"missing vocab", map[string]any{"vocab": "nope.txt"}, `option vocab: the archive has no file "nope.txt"`},
		{"not a vocabulary", map[string]any{"vocab": "index_to_name.json"}, "no [UNK]"},
		{"max_length", map[string]any{"max_length": int64(1)}, "max_length"},
		{"top_k", map[string]any{"top_k": int64(-1)}, "top_k"},
		{"lowercase", map[string]any{"lowercase": "yes"}, "lowercase"},
	} {
		t.Run(c.name, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("..", "models", "configs", "textcls.toml"))
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := archive.ParseModelConfig(archive.ConfigTOML, data)
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range c.options {
				cfg.Options[k] = v
			}
			_, err = New("text_classifier", Context{Config: cfg, Dir: textZoo})
			if err == nil || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("error %v, want one mentioning %q", err, c.msg)
			}
		})
	}
}

func loadTextModel(t testing.TB) *torch.Module {
	t.Helper()
	m, err := torch.Load(filepath.Join(textZoo, "model.pt"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func logitRows(t testing.TB, out []Tensor) [][]float32 {
	t.Helper()
	o := out[0]
	classes := int(o.Shape[1])
	rows := make([][]float32, o.Shape[0])
	for i := range rows {
		for c := range classes {
			rows[i] = append(rows[i], math.Float32frombits(binary.LittleEndian.Uint32(o.Data[4*(i*classes+c):])))
		}
	}
	return rows
}

// A text's logits are the same alone and padded in a batch with longer texts, to 1e-5: the
// model masks padding out. Batches mix samples of one and of several texts, as requests do.
// The held-out accuracy through the handler is Python's.
func TestTextClassifierBatchedMatchesUnbatched(t *testing.T) {
	tc := newTestTextClassifier(t, nil)
	m := loadTextModel(t)
	h := readTextHeldOut(t)
	var samples []*Sample
	var labels []string
	for i := 0; i < len(h.Items); {
		n := 1 + i%3 // samples of 1, 2 and 3 texts
		n = min(n, len(h.Items)-i)
		var texts []string
		for _, it := range h.Items[i : i+n] {
			texts = append(texts, it.Text)
			labels = append(labels, it.Label)
		}
		b, _ := json.Marshal(texts)
		s, err := tc.Preprocess(textRequest(textBody("application/json", string(b))))
		if err != nil {
			t.Fatal(err)
		}
		samples = append(samples, s)
		i += n
	}
	var batched, alone [][]float32
	for start := 0; start < len(samples); start += 16 {
		batch := samples[start:min(start+16, len(samples))]
		outs, err := tc.Infer(m, batch)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range outs {
			batched = append(batched, logitRows(t, o)...)
		}
	}
	for _, s := range samples {
		for _, ids := range s.State.(textState).ids {
			outs, err := tc.Infer(m, []*Sample{{Items: 1, State: textState{ids: [][]int64{ids}}}})
			if err != nil {
				t.Fatal(err)
			}
			alone = append(alone, logitRows(t, outs[0])...)
		}
	}
	maxDiff, correct := 0.0, 0
	for i := range batched {
		for c := range batched[i] {
			maxDiff = max(maxDiff, math.Abs(float64(batched[i][c]-alone[i][c])))
		}
		if tc.labels[int(argmaxRow(batched[i]))] == labels[i] {
			correct++
		}
	}
	acc := float64(correct) / float64(len(batched))
	t.Logf("%d held-out texts: batched vs alone max abs logit difference %.3g; accuracy %.4f", len(batched), maxDiff, acc)
	if maxDiff > tolerance.Kernels {
		t.Errorf("padding changes logits by up to %g", maxDiff)
	}
	if acc < 0.95 {
		t.Errorf("held-out accuracy %.4f < 0.95", acc)
	}
}

func argmaxRow(x []float32) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}

// A request of tensors (the Open Inference Protocol) is padded anew with the batch and gets
// the logits of the same text sent as text.
func TestTextClassifierTensorSamples(t *testing.T) {
	tc := newTestTextClassifier(t, nil)
	m := loadTextModel(t)
	text, err := tc.Preprocess(textRequest(textBody("text/plain", "the coffee was not good at all")))
	if err != nil {
		t.Fatal(err)
	}
	seq := text.State.(textState).ids[0]
	width := len(seq) + 3
	ids, mask := make([]byte, 8*width), make([]byte, 8*width)
	for j, id := range seq {
		binary.LittleEndian.PutUint64(ids[8*j:], uint64(id))
		binary.LittleEndian.PutUint64(mask[8*j:], 1)
	}
	tensors := &Sample{Items: 1, Tensors: []Tensor{
		{DType: torch.Int64, Shape: []int64{1, int64(width)}, Data: ids},
		{DType: torch.Int64, Shape: []int64{1, int64(width)}, Data: mask},
	}}
	long, err := tc.Preprocess(textRequest(textBody("text/plain", strings.Repeat("a fine film, ", 20))))
	if err != nil {
		t.Fatal(err)
	}
	outs, err := tc.Infer(m, []*Sample{text, tensors, long})
	if err != nil {
		t.Fatal(err)
	}
	a, b := logitRows(t, outs[0])[0], logitRows(t, outs[1])[0]
	for c := range a {
		if math.Abs(float64(a[c]-b[c])) > tolerance.Kernels {
			t.Fatalf("tensor request logits %v, text request %v", b, a)
		}
	}
	bad := &Sample{Items: 1, Tensors: tensors.Tensors[:1]}
	if _, err := tc.Infer(m, []*Sample{bad}); err == nil {
		t.Fatal("a sample of one tensor was inferred")
	}
}

// Postprocess writes every class, most probable first, as TorchServe's image classifier
// does, and an array for several texts.
func TestTextClassifierPostprocess(t *testing.T) {
	tc := newTestTextClassifier(t, map[string]any{"top_k": int64(0)})
	logits := []float32{2, -1, -3, 0.5}
	data := make([]byte, 4*len(logits))
	for i, v := range logits {
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(v))
	}
	out := []Tensor{{DType: torch.Float32, Shape: []int64{2, 2}, Data: data}}
	resp, err := tc.Postprocess(&Sample{Items: 2}, out)
	if err != nil {
		t.Fatal(err)
	}
	// Floats at a fixed width: the shortest digits, padded to 17 (internal/jsonfloat). The
	// values are compared as numbers: Go's math.Exp takes another path on a CPU without FMA,
	// which can change the last digit.
	layout := regexp.MustCompile(`^\[\n\{\n  "negative": (\d\.\d{16}e-\d\d),\n  "positive": (\d\.\d{16}e-\d\d)\n\},\n` +
		`\{\n  "positive": (\d\.\d{16}e-\d\d),\n  "negative": (\d\.\d{16}e-\d\d)\n\}\n\]\n$`)
	m := layout.FindStringSubmatch(string(resp.Body))
	if m == nil || resp.ContentType != "application/json" {
		t.Fatalf("body %q (%s): not two objects, most probable first, at a fixed width", resp.Body, resp.ContentType)
	}
	for i, want := range []float64{0.9525741268224334, 0.04742587317756679, 0.9706877692486436, 0.029312230751356316} {
		if got, _ := strconv.ParseFloat(m[i+1], 64); math.Abs(got-want) > 1e-15 {
			t.Errorf("probability %d: %s, want %v", i, m[i+1], want)
		}
	}
	resp, err = tc.Postprocess(&Sample{Items: 1}, []Tensor{{DType: torch.Float32, Shape: []int64{1, 2}, Data: data[:8]}})
	if err != nil {
		t.Fatal(err)
	}
	var one map[string]float64
	if err := json.Unmarshal(resp.Body, &one); err != nil || len(one) != 2 || !bytes.HasPrefix(resp.Body, []byte("{\n  \"negative\"")) {
		t.Fatalf("body %q: %v", resp.Body, err)
	}
	if _, err := tc.Postprocess(&Sample{Items: 1}, []Tensor{{DType: torch.Int64, Shape: []int64{1, 2}, Data: make([]byte, 16)}}); err == nil {
		t.Fatal("int64 logits accepted")
	}
}

// A request of more texts than max_texts is refused before any is tokenized.
func TestMaxTexts(t *testing.T) {
	tc := newTestTextClassifier(t, map[string]any{"max_texts": int64(3)})
	three := []byte(`["a", "b", "c"]`)
	if s, err := tc.Preprocess(&Request{Inputs: []Payload{{ContentType: "application/json", Data: three}}}); err != nil || s.Items != 3 {
		t.Fatalf("3 texts: %v", err)
	}
	_, err := tc.Preprocess(&Request{Inputs: []Payload{{ContentType: "application/json", Data: []byte(`["a", "b", "c", "d"]`)}}})
	if err == nil || !errors.Is(err, errkind.BadInput) || !strings.Contains(err.Error(), "over max_texts (3)") {
		t.Fatalf("4 texts: %v", err)
	}
	if tc := newTestTextClassifier(t, nil); tc.maxTexts != defaultMaxTexts {
		t.Fatalf("default max_texts %d", tc.maxTexts)
	}
}
