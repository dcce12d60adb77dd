package handlers

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/torchd/torchd/errkind"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/internal/tolerance"
	"github.com/torchd/torchd/torch"
)

// minilmZoo is what models/minilm.py builds.
var minilmZoo = filepath.Join("..", "models", "out", "minilm")

// newTestTextEmbedding builds the handler as the daemon does for the minilm archive: from
// models/configs/minilm.toml, over a directory laid out as the archive is (vocab.txt and the
// contents of st/ at the root), with models/hfbert.py's BPE tokenizer.json beside them.
func newTestTextEmbedding(t testing.TB, options map[string]any) *TextEmbedding {
	t.Helper()
	if _, err := os.Stat(filepath.Join(minilmZoo, "model.pt")); err != nil {
		t.Fatalf("%v: run `make models` first", err)
	}
	dir := t.TempDir()
	for _, f := range []string{"vocab.txt", "st/modules.json", "st/sentence_bert_config.json", "st/1_Pooling/config.json", "../hfbert/tokenizer_bpe.json"} {
		b, err := os.ReadFile(filepath.Join(minilmZoo, f))
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(dir, strings.TrimPrefix(strings.TrimPrefix(f, "st/"), "../hfbert/"))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(filepath.Join("..", "models", "configs", "minilm.toml"))
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
	h, err := New(cfg.Handler, Context{Config: cfg, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	return h.(*TextEmbedding)
}

type minilmRefs struct {
	Dim       int `json:"dim"`
	MaxLength int `json:"max_length"`
	Items     []struct {
		Text      string    `json:"text"`
		IDs       []int64   `json:"ids"`
		Embedding []float64 `json:"embedding"`
	} `json:"items"`
}

func readMinilmRefs(t testing.TB) minilmRefs {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(minilmZoo, "embeddings_refs.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r minilmRefs
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// The handler reads its pooling, normalization and max_seq_length from the
// sentence-transformers files, and tokenizes as the model's Hugging Face tokenizer.
func TestTextEmbeddingConfigAndIDs(t *testing.T) {
	te := newTestTextEmbedding(t, nil)
	if te.Dim() != 384 || te.MaxSeqLength() != 256 || te.pooling != "mean" || !te.normalize {
		t.Fatalf("dim %d, max_seq_length %d, pooling %q, normalize %v; want 384, 256, mean, true", te.Dim(), te.MaxSeqLength(), te.pooling, te.normalize)
	}
	for i, it := range readMinilmRefs(t).Items {
		s, err := te.Preprocess(textRequest(textBody("text/plain", it.Text)))
		if err != nil {
			t.Fatal(err)
		}
		if got := s.State.(embedState).ids[0]; !slices.Equal(got, it.IDs) {
			t.Errorf("text %d: ids %v, want %v", i, got, it.IDs)
		}
		if te.Tokens(s) != len(it.IDs) {
			t.Errorf("text %d: Tokens %d, want %d", i, te.Tokens(s), len(it.IDs))
		}
	}
}

// A byte-level BPE tokenizer.json (models/hfbert.py's, RoBERTa-style) gives Hugging Face's ids,
// cut at max_seq_length as Hugging Face cuts them, or refused with truncate = false; the
// model runs on them.
func TestTextEmbeddingBPETokenizer(t *testing.T) {
	te := newTestTextEmbedding(t, map[string]any{"tokenizer": "tokenizer_bpe.json"})
	var refs struct {
		Items []struct {
			Text string  `json:"text"`
			IDs  []int64 `json:"ids"`
		} `json:"items"`
	}
	b, err := os.ReadFile(filepath.Join("..", "models", "out", "hfbert", "tokenizer_bpe_refs.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &refs); err != nil {
		t.Fatal(err)
	}
	var batch []*Sample
	cut := 0
	for i, it := range refs.Items {
		if strings.TrimSpace(it.Text) == "" {
			continue
		}
		want := it.IDs
		if len(want) > te.MaxSeqLength() {
			// Hugging Face's truncation keeps the first tokens and </s>.
			want = append(slices.Clone(want[:te.MaxSeqLength()-1]), want[len(want)-1])
			cut++
		}
		s, err := te.Preprocess(textRequest(textBody("text/plain", it.Text)))
		if err != nil {
			t.Fatal(err)
		}
		if got := s.State.(embedState).ids[0]; !slices.Equal(got, want) {
			t.Errorf("text %d %+q: ids %v, want %v", i, it.Text, got, want)
		}
		if len(batch) < 8 {
			batch = append(batch, s)
		}
	}
	if cut == 0 {
		t.Fatal("no text over max_seq_length")
	}
	m, err := torch.Load(filepath.Join(minilmZoo, "model.pt"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	outs, err := Infer(te, m, batch)
	if err != nil {
		t.Fatal(err)
	}
	for i := range batch {
		resp, err := te.Postprocess(batch[i], outs[i])
		if err != nil {
			t.Fatal(err)
		}
		var got [][]float64
		if err := json.Unmarshal(resp.Body, &got); err != nil || len(got) != 1 || len(got[0]) != 384 {
			t.Fatalf("text %d: %v: %.200s", i, err, resp.Body)
		}
	}
	strict := newTestTextEmbedding(t, map[string]any{"tokenizer": "tokenizer_bpe.json", "truncate": false})
	if _, err := strict.Preprocess(textRequest(textBody("text/plain", strings.Repeat("中", 300)))); err == nil || !strings.Contains(err.Error(), "over the model's max_seq_length of 256") {
		t.Fatalf("300 CJK characters with truncate = false: %v, want a 400 naming max_seq_length", err)
	}
}

// With truncate = false, text over max_seq_length is refused rather than cut.
func TestTextEmbeddingRefusesOverLongWhenConfigured(t *testing.T) {
	te := newTestTextEmbedding(t, map[string]any{"truncate": false})
	if _, err := te.Preprocess(textRequest(textBody("text/plain", strings.Repeat("great ", 254)))); err != nil {
		t.Fatalf("254 words (256 ids): %v", err)
	}
	_, err := te.Preprocess(textRequest(textBody("text/plain", strings.Repeat("great ", 255))))
	if err == nil || !errors.Is(err, errkind.BadInput) || !strings.Contains(err.Error(), "over the model's max_seq_length of 256") {
		t.Fatalf("255 words: %v, want a 400 naming max_seq_length", err)
	}
	cut := newTestTextEmbedding(t, nil)
	s, err := cut.Preprocess(textRequest(textBody("text/plain", strings.Repeat("great ", 255))))
	if err != nil || cut.Tokens(s) != 256 {
		t.Fatalf("truncate = true: %v, %d tokens", err, cut.Tokens(s))
	}
}

// The model's embeddings equal sentence-transformers' encode(), each text alone and all of
// them in one padded batch made of several samples.
func TestTextEmbeddingMatchesSentenceTransformers(t *testing.T) {
	te := newTestTextEmbedding(t, nil)
	m, err := torch.Load(filepath.Join(minilmZoo, "model.pt"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	refs := readMinilmRefs(t)
	var batch []*Sample
	for _, it := range refs.Items {
		body, _ := json.Marshal(it.Text)
		s, err := te.Preprocess(textRequest(textBody("application/json", string(body))))
		if err != nil {
			t.Fatal(err)
		}
		batch = append(batch, s)
	}
	check := func(what string, outs [][]Tensor) {
		t.Helper()
		for i, out := range outs {
			resp, err := te.Postprocess(batch[i], out)
			if err != nil {
				t.Fatal(err)
			}
			var got [][]float64
			if err := json.Unmarshal(resp.Body, &got); err != nil || len(got) != 1 {
				t.Fatalf("%s %d: %v %.100s", what, i, err, resp.Body)
			}
			want := refs.Items[i].Embedding
			var dot, ng, nw, maxAbs float64
			for k := range want {
				dot += got[0][k] * want[k]
				ng += got[0][k] * got[0][k]
				nw += want[k] * want[k]
				maxAbs = max(maxAbs, math.Abs(got[0][k]-want[k]))
			}
			if cos := dot / math.Sqrt(ng*nw); cos < 0.99999 || maxAbs > 1e-4 {
				t.Errorf("%s %d: cosine %.7f, max abs %.2e", what, i, cos, maxAbs)
			}
		}
	}
	var alone [][]Tensor
	for _, s := range batch {
		out, err := te.Infer(m, []*Sample{s})
		if err != nil {
			t.Fatal(err)
		}
		alone = append(alone, out[0])
	}
	check("alone", alone)
	together, err := te.Infer(m, batch)
	if err != nil {
		t.Fatal(err)
	}
	check("batched", together)
	// Padding changes a text's embedding by float rounding at most.
	for i := range batch {
		a, b := alone[i][0].Data, together[i][0].Data
		for k := 0; k < len(a); k += 4 {
			d := math.Abs(float64(math.Float32frombits(binary.LittleEndian.Uint32(a[k:]))) - float64(math.Float32frombits(binary.LittleEndian.Uint32(b[k:]))))
			if d > tolerance.Kernels {
				t.Fatalf("text %d: alone and batched differ by %.2e", i, d)
			}
		}
	}
}
