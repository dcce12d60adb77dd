package text_test

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"mime/multipart"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/backends/libtorch"
	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/core/coretest"
	"github.com/torchd/torchd/frontend/frontendtest"
	"github.com/torchd/torchd/frontend/torchserve"
	"github.com/torchd/torchd/internal/zootest"
	"github.com/torchd/torchd/lifecycle"
)

// The sentiment classifier of the zoo (models/out/textcls, its archive in model-store: `make
// models archives`) served on LibTorch through TorchServe's inference API: what the text
// handler makes of each request form, and the accuracy Python measured.

var (
	zooDir   = filepath.Join("..", "..", "models", "out")
	storeDir = filepath.Join("..", "..", "model-store")
)

// served is TorchServe's API over a registry of LibTorch whose registrations open the model
// store's archives, as the daemon wires them.
type served struct {
	t   testing.TB
	api *torchserve.API
}

func serve(t testing.TB) *served {
	t.Helper()
	reg := coretest.NewRegistryOf(t, libtorch.Backend{})
	open := func(req core.RegisterRequest) (*core.ModelVersion, error) {
		am, err := archive.Open(filepath.Join(storeDir, req.URL))
		if err != nil {
			return nil, core.Errorf(core.ErrModelNotFound, "%s: %v", req.URL, err)
		}
		name := req.Name
		if name == "" {
			name = am.Name
		}
		return reg.Add(name, am.Version, req, am)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	life := lifecycle.New(lifecycle.Config{Registry: reg, Open: open, ModelStore: storeDir, Log: log})
	t.Cleanup(life.Stop)
	return &served{t: t, api: &torchserve.API{Registry: reg, Life: life, Ready: life.Ready, MaxRequestSize: 6553500, Log: log}}
}

func (s *served) register(query string) {
	s.t.Helper()
	r := frontendtest.Do(s.api.ManagementRoutes(), frontendtest.Request{Method: "POST", URI: "/models?" + query})
	if r.Status != 200 {
		s.t.Fatalf("register %s: %d %s", query, r.Status, r.Body)
	}
}

func (s *served) predict(contentType string, body []byte) frontendtest.Response {
	return frontendtest.Do(s.api.InferenceRoutes(), frontendtest.Request{Method: "POST", URI: "/predictions/textcls",
		Header: map[string]string{"Content-Type": contentType}, Body: body})
}

// top1 returns the first key of a TorchServe top-k object, which is in descending order.
func top1(body []byte) string { return zootest.Top1(body) }

// errorShape asserts TorchServe's error body for status.
func errorShape(t testing.TB, r frontendtest.Response, status int, msgPart string) {
	t.Helper()
	var e struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	if r.Status != status || json.Unmarshal(r.Body, &e) != nil || e.Code != status || !strings.Contains(e.Message, msgPart) {
		t.Fatalf("%d %s, want code %d with a message containing %q", r.Status, r.Body, status, msgPart)
	}
}

// textHeldOut returns the sentiment model's held-out sentences and their labels.
func textHeldOut(t testing.TB) ([]string, []string) { return zootest.TextHeldOut(t, zooDir) }

// Every held-out sentence sent concurrently as a raw text/plain body, so that batches of
// different lengths form: the accuracy Python measured is reached.
func TestTextClassifierAccuracy(t *testing.T) {
	s := serve(t)
	s.register("url=textcls.mar&batch_size=16&max_batch_delay=5&initial_workers=2&synchronous=true")
	texts, labels := textHeldOut(t)
	var correct atomic.Int64
	var wg sync.WaitGroup
	work := make(chan int)
	for range 16 {
		wg.Go(func() {
			for i := range work {
				r := s.predict("text/plain; charset=utf-8", []byte(texts[i]))
				if r.Status != 200 {
					t.Errorf("sentence %d: %d %s", i, r.Status, r.Body)
					continue
				}
				if top1(r.Body) == labels[i] {
					correct.Add(1)
				}
			}
		})
	}
	for i := range texts {
		work <- i
	}
	close(work)
	wg.Wait()
	acc := float64(correct.Load()) / float64(len(texts))
	t.Logf("held-out accuracy: %.4f over %d sentences", acc, len(texts))
	if acc < 0.95 {
		t.Fatalf("accuracy %.4f < 0.95", acc)
	}
}

// The request forms: a JSON list is several texts and answers an array, in order; a
// multipart form's fields too; invalid UTF-8 and empty texts are the client's error. The
// Content-Type decides whether a text body is JSON, as in TorchServe: a text/plain body that
// looks like a JSON list is one text, answered with one object; the same body sent as
// application/json is two texts, answered with a list.
func TestTextClassifierRequests(t *testing.T) {
	s := serve(t)
	s.register("url=textcls.mar&initial_workers=1&synchronous=true")

	one := s.predict("application/json", []byte(`{"text": "What a wonderful film!"}`))
	if one.Status != 200 || top1(one.Body) != "positive" {
		t.Fatalf("one text: %d %s", one.Status, one.Body)
	}
	var probs map[string]float64
	if err := json.Unmarshal(one.Body, &probs); err != nil || len(probs) != 2 || probs["positive"]+probs["negative"] < 0.999999 || probs["positive"]+probs["negative"] > 1.000001 {
		t.Fatalf("one text: want both classes' probabilities, got %s", one.Body)
	}

	texts := []string{"the coffee was not good", "I loved every minute of this concert", "  Boring.  "}
	want := []string{"negative", "positive", "negative"}
	b, _ := json.Marshal(texts)
	many := s.predict("application/json", b)
	var arr []json.RawMessage
	if err := json.Unmarshal(many.Body, &arr); err != nil || many.Status != 200 || len(arr) != len(texts) {
		t.Fatalf("JSON list of %d texts: %d %s", len(texts), many.Status, many.Body)
	}
	for i, a := range arr {
		if got := top1(a); got != want[i] {
			t.Errorf("text %d %q: %s, want %s", i, texts[i], got, want[i])
		}
	}

	var form bytes.Buffer
	mw := multipart.NewWriter(&form)
	mw.WriteField("a", "a truly delightful soundtrack")
	mw.WriteField("b", "we hated the hotel")
	mw.Close()
	mp := s.predict(mw.FormDataContentType(), form.Bytes())
	arr = nil
	if err := json.Unmarshal(mp.Body, &arr); err != nil || mp.Status != 200 || len(arr) != 2 || top1(arr[0]) != "positive" || top1(arr[1]) != "negative" {
		t.Fatalf("multipart: %d %s", mp.Status, mp.Body)
	}

	errorShape(t, s.predict("text/plain", []byte("caf\xe9 was great")), 400, "UTF-8")
	errorShape(t, s.predict("text/plain", nil), 400, "")
	errorShape(t, s.predict("text/plain", []byte(" \n ")), 400, "empty")
	errorShape(t, s.predict("application/json", []byte(`{"text": ""}`)), 400, "empty")

	body := []byte(`["a wonderful film", "a dull film"]`)
	var single map[string]float64
	r := s.predict("text/plain", body)
	if err := json.Unmarshal(r.Body, &single); err != nil || r.Status != 200 || len(single) < 2 {
		t.Fatalf("text/plain JSON-looking body: %d %s", r.Status, r.Body)
	}
	var two []map[string]float64
	r = s.predict("application/json", body)
	if err := json.Unmarshal(r.Body, &two); err != nil || r.Status != 200 || len(two) != 2 {
		t.Fatalf("application/json list: %d %s", r.Status, r.Body)
	}
}
