package torchserve_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/torchd/torchd/core/coretest"
)

// Every inference API is one core call, so each counts what it serves in the metrics and
// the statistics: explanations (TorchServe's, KServe v1's) and embeddings as predictions do,
// their failures as failures.
func TestExplanationsAndEmbeddingsCounted(t *testing.T) {
	s := serve(t, 1, []storeArchive{digitsV1, minilm})
	s.register(t, "url=digits.mar&initial_workers=1&synchronous=true")
	s.register(t, "url=minilm.mar&initial_workers=1&synchronous=true")
	pngs, _ := heldOut(t)

	if r := s.inf("POST", "/explanations/digits", "image/png", pngs[0]); r.status != 200 {
		t.Fatalf("explanation: %d %.200s", r.status, r.body)
	}
	if r := s.inf("POST", "/v1/models/digits:explain", "application/json", []byte(`{"instances": [{"data": "`+base64.StdEncoding.EncodeToString(pngs[1])+`"}]}`)); r.status != 200 {
		t.Fatalf("KServe v1 explanation: %d %.200s", r.status, r.body)
	}
	errorShape(t, s.inf("POST", "/explanations/digits", "image/png", []byte("garbage")), 400, "BadRequestException", "")
	if r, _ := s.embed(t, map[string]any{"model": "minilm", "input": []string{"one", "two"}}); r.status != 200 {
		t.Fatalf("embeddings: %d %.200s", r.status, r.body)
	}
	if r, _ := s.embed(t, map[string]any{"model": "minilm", "input": []any{[]any{"not", "ids"}}}); r.status != 400 {
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
		s.inf("GET", "/v2/models/"+c.model+"/stats", "", nil).json(t, &stats)
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

// An embeddings request whose client closes the connection as soon as it has sent it is
// counted 499, as a prediction is, not 200: no one read its answer.
func TestAbandonedEmbeddingsCounted(t *testing.T) {
	s := serve(t, 1, []storeArchive{minilm})
	s.register(t, "url=minilm.mar&initial_workers=1&synchronous=true")
	texts := make([]string, 64)
	for i := range texts {
		texts[i] = strings.Repeat(fmt.Sprintf("sentence %d keeps the tokenizer busy. ", i), 20)
	}
	body, _ := json.Marshal(map[string]any{"model": "minilm", "input": texts})
	c, err := net.Dial("tcp", s.listen(t))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(body))
	if _, err := c.Write(body); err != nil {
		t.Fatal(err)
	}
	c.Close()
	counted := regexp.MustCompile(`torchd_requests_total\{model="minilm",version="[^"]*",code="(\d+)"\} (\d+)`)
	var codes [][]string
	coretest.WaitFor(t, "the abandoned request to be counted", func() bool {
		codes = counted.FindAllStringSubmatch(string(do(s.metrics.Routes(), "GET", "/metrics", "", nil).body), -1)
		return len(codes) > 0
	})
	if len(codes) != 1 || codes[0][1] != "499" || codes[0][2] != "1" {
		t.Fatalf("the abandoned request was counted %v, want once as 499", codes)
	}
}

// embed posts body to /v1/embeddings.
func (s *served) embed(t testing.TB, body any) (response, struct{}) {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	return s.inf("POST", "/v1/embeddings", "application/json", b), struct{}{}
}

// scrape is the value of the metric of the metrics port with name and labels.
func (s *served) scrape(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	r := do(s.metrics.Routes(), "GET", "/metrics", "", nil)
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(r.body))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range fams[name].GetMetric() {
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		match := true
		for k, v := range labels {
			match = match && got[k] == v
		}
		if match {
			if m.GetGauge() != nil {
				return m.GetGauge().GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	t.Fatalf("no %s%v in the exposition", name, labels)
	return 0
}
