package daemon_test

import (
	"encoding/base64"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// Every inference API is one core call, so each counts what it serves in the metrics and
// the statistics: explanations (TorchServe's, KServe v1's) and embeddings as predictions do,
// their failures as failures.
func TestExplanationsAndEmbeddingsCounted(t *testing.T) {
	s := startServer(t)
	s.register(t, "url=digits.mar&initial_workers=1&synchronous=true")
	s.register(t, "url=minilm.mar&initial_workers=1&synchronous=true")
	pngs, _ := heldOut(t)

	if r := do(t, "POST", s.inf+"/explanations/digits", "image/png", pngs[0]); r.status != 200 {
		t.Fatalf("explanation: %d %.200s", r.status, r.body)
	}
	if r := do(t, "POST", s.inf+"/v1/models/digits:explain", "application/json", []byte(`{"instances": [{"data": "`+base64.StdEncoding.EncodeToString(pngs[1])+`"}]}`)); r.status != 200 {
		t.Fatalf("KServe v1 explanation: %d %.200s", r.status, r.body)
	}
	errorShape(t, do(t, "POST", s.inf+"/explanations/digits", "image/png", []byte("garbage")), 400, "BadRequestException", "")
	if r, _ := embed(t, s, map[string]any{"model": "minilm", "input": []string{"one", "two"}}); r.status != 200 {
		t.Fatalf("embeddings: %d %.200s", r.status, r.body)
	}
	if r, _ := embed(t, s, map[string]any{"model": "minilm", "input": []any{[]any{"not", "ids"}}}); r.status != 400 {
		t.Fatalf("embeddings of a malformed input: %d %.200s, want 400", r.status, r.body)
	}

	for _, c := range []struct {
		model         string
		success, fail uint64
	}{{"digits", 2, 1}, {"minilm", 1, 1}} {
		var stats struct {
			ModelStats []struct {
				Version        string
				InferenceStats map[string]struct{ Count, Ns uint64 } `json:"inference_stats"`
			} `json:"model_stats"`
		}
		do(t, "GET", s.inf+"/v2/models/"+c.model+"/stats", "", nil).json(t, &stats)
		if len(stats.ModelStats) != 1 {
			t.Fatalf("%s: statistics %+v", c.model, stats)
		}
		st := stats.ModelStats[0]
		if st.InferenceStats["success"].Count != c.success || st.InferenceStats["fail"].Count != c.fail || st.InferenceStats["compute_infer"].Count != c.success {
			t.Errorf("%s: statistics %+v, want %d successes (each with its compute) and %d failure", c.model, st.InferenceStats, c.success, c.fail)
		}
		for code, want := range map[string]uint64{"200": c.success, "400": c.fail} {
			got := s.scrape(t, "torchd_requests_total", map[string]string{"model": c.model, "version": st.Version, "code": code})
			if uint64(got) != want {
				t.Errorf("%s: torchd_requests_total code %s = %v, want %d", c.model, code, got, want)
			}
		}
	}
}

// An embeddings request to a model that is still loading is answered 503 with Retry-After,
// as the other inference APIs answer it, not 404 as for a model that does not exist. The
// load is held in its warm-up forward by the probe handler.
func TestEmbeddingsWhileLoading(t *testing.T) {
	d, _ := startInProcess(t, "digits_tensor", []string{"--model-store", probeStore(t, "digits_tensor", "digits"),
		"--models", "digits_tensor=digits_tensor", "--workers", "1"}, nil)
	inf, mgmt, _ := d.Addrs()
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	probe.Before(func(int) {
		once.Do(func() {
			close(held)
			<-release
		})
	})
	t.Cleanup(func() { probe.Before(nil) })
	registered := make(chan int, 1)
	go func() {
		resp, err := http.Post("http://"+mgmt+"/models?url=digits_tensor&model_name=loading&synchronous=true", "", nil)
		if err != nil {
			registered <- 0
			return
		}
		resp.Body.Close()
		registered <- resp.StatusCode
	}()
	<-held

	body := []byte(`{"model": "loading", "input": "text"}`)
	r := do(t, "POST", "http://"+inf+"/v1/embeddings", "application/json", body)
	var e struct {
		Error map[string]any `json:"error"`
	}
	r.json(t, &e)
	if r.status != 503 || r.header.Get("Retry-After") == "" || e.Error["type"] != "server_error" || !strings.Contains(e.Error["message"].(string), "still loading") {
		t.Errorf("embeddings while loading: %d Retry-After %q %s, want 503 server_error with Retry-After", r.status, r.header.Get("Retry-After"), r.body)
	}
	if r := do(t, "POST", "http://"+inf+"/v1/embeddings", "application/json", []byte(`{"model": "nope", "input": "text"}`)); r.status != 404 {
		t.Errorf("embeddings of a model that does not exist: %d %s, want 404", r.status, r.body)
	}
	close(release)
	if st := <-registered; st != 200 {
		t.Fatalf("registration: %d", st)
	}
	// Loaded, it is what it is: not an embedding model.
	r = do(t, "POST", "http://"+inf+"/v1/embeddings", "application/json", body)
	r.json(t, &e)
	if r.status != 400 || e.Error["param"] != "model" {
		t.Errorf("embeddings of a loaded tensor model: %d %s, want 400 naming the model", r.status, r.body)
	}
}
