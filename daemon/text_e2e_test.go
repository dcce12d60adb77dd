package daemon_test

import (
	"bytes"
	"encoding/json"
	"mime/multipart"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
)

func init() {
	storeArchives = append(storeArchives, storeArchive{"textcls", "textcls", "textcls", "1.0", ""})
}

// textHeldOut returns the sentiment model's held-out sentences and their labels.
func textHeldOut(t testing.TB) ([]string, []string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(zooDir, "textcls", "heldout.json"))
	if err != nil {
		t.Fatal(err)
	}
	var h struct {
		Items []struct {
			Text  string `json:"text"`
			Label string `json:"label"`
		} `json:"items"`
	}
	if err := json.Unmarshal(b, &h); err != nil {
		t.Fatal(err)
	}
	var texts, labels []string
	for _, it := range h.Items {
		texts = append(texts, it.Text)
		labels = append(labels, it.Label)
	}
	return texts, labels
}

// Every held-out sentence sent concurrently as a raw text/plain body, so that batches of
// different lengths form: the accuracy Python measured is reached through HTTP.
func TestTextClassifierAccuracyOverHTTP(t *testing.T) {
	s := startServer(t)
	s.register(t, "url=textcls.mar&batch_size=16&max_batch_delay=5&initial_workers=2&synchronous=true")
	texts, labels := textHeldOut(t)
	var correct atomic.Int64
	forEach(len(texts), 16, func(i int) {
		r := do(t, "POST", s.inf+"/predictions/textcls", "text/plain; charset=utf-8", []byte(texts[i]))
		if r.status != 200 {
			t.Errorf("sentence %d: %d %s", i, r.status, r.body)
			return
		}
		if top1(r.body) == labels[i] {
			correct.Add(1)
		}
	})
	acc := float64(correct.Load()) / float64(len(texts))
	t.Logf("held-out accuracy through HTTP: %.4f over %d sentences", acc, len(texts))
	if acc < 0.95 {
		t.Fatalf("accuracy %.4f < 0.95", acc)
	}
	s.batching(t, "textcls")
}

// The request forms: a JSON list is several texts and answers an array, in order; a
// multipart form's fields too; invalid UTF-8 and empty texts are the client's error.
func TestTextClassifierRequestsOverHTTP(t *testing.T) {
	s := startServer(t, "--models", "textcls=textcls.mar")
	s.waitHealthy(t)
	url := s.inf + "/predictions/textcls"

	one := do(t, "POST", url, "application/json", []byte(`{"text": "What a wonderful film!"}`))
	if one.status != 200 || top1(one.body) != "positive" {
		t.Fatalf("one text: %d %s", one.status, one.body)
	}
	var probs map[string]float64
	one.json(t, &probs)
	if len(probs) != 2 || probs["positive"]+probs["negative"] < 0.999999 || probs["positive"]+probs["negative"] > 1.000001 {
		t.Fatalf("one text: want both classes' probabilities, got %s", one.body)
	}

	texts := []string{"the coffee was not good", "I loved every minute of this concert", "  Boring.  "}
	want := []string{"negative", "positive", "negative"}
	b, _ := json.Marshal(texts)
	many := do(t, "POST", url, "application/json", b)
	var arr []json.RawMessage
	many.json(t, &arr)
	if many.status != 200 || len(arr) != len(texts) {
		t.Fatalf("JSON list of %d texts: %d %s", len(texts), many.status, many.body)
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
	mp := do(t, "POST", url, mw.FormDataContentType(), form.Bytes())
	arr = nil
	mp.json(t, &arr)
	if mp.status != 200 || len(arr) != 2 || top1(arr[0]) != "positive" || top1(arr[1]) != "negative" {
		t.Fatalf("multipart: %d %s", mp.status, mp.body)
	}

	errorShape(t, do(t, "POST", url, "text/plain", []byte("caf\xe9 was great")), 400, "", "UTF-8")
	errorShape(t, do(t, "POST", url, "text/plain", nil), 400, "", "")
	errorShape(t, do(t, "POST", url, "text/plain", []byte(" \n ")), 400, "", "empty")
	errorShape(t, do(t, "POST", url, "application/json", []byte(`{"text": ""}`)), 400, "", "empty")
}

// The Content-Type decides whether a text body is JSON, as in TorchServe: a text/plain body
// that looks like a JSON list is one text, answered with one object; the same body sent as
// application/json is two texts, answered with a list.
func TestTextPlainFollowsContentType(t *testing.T) {
	s := startServer(t)
	s.register(t, "url=textcls.mar&initial_workers=1&synchronous=true")
	body := []byte(`["a wonderful film", "a dull film"]`)
	var one map[string]float64
	r := do(t, "POST", s.inf+"/predictions/textcls", "text/plain", body)
	r.json(t, &one)
	if r.status != 200 || len(one) < 2 {
		t.Fatalf("text/plain JSON-looking body: %d %s", r.status, r.body)
	}
	var two []map[string]float64
	r = do(t, "POST", s.inf+"/predictions/textcls", "application/json", body)
	r.json(t, &two)
	if r.status != 200 || len(two) != 2 {
		t.Fatalf("application/json list: %d %s", r.status, r.body)
	}
}
