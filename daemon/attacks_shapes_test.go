package daemon_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The attacks of issue 50 through declared shapes: each dimension in range, their product
// an overflow (a makeslice panic that took the server down when a worker built its warm-up
// sample) or tens of gigabytes. The model fails alone, with its reason; the rest serve.

// digitsZeros is one digits_tensor request of zeros, in TorchServe's JSON tensor form.
var digitsZeros = `{"data": [` + "0" + strings.Repeat(",0", 783) + `], "shape": [1, 1, 28, 28]}`

// An archive config declaring shape = [-1, 100000, 100000, 100000] (or a product of 40 GB)
// is refused at registration with a 400 naming the key; the server serves on.
func TestHugeDeclaredShape(t *testing.T) {
	s := startServer(t, "--models", "digits_tensor=digits_tensor.mar")
	s.waitHealthy(t)
	for name, shape := range map[string]string{"overflow": "[-1, 100000, 100000, 100000]", "forty_gb": "[-1, 10000, 1000, 1000]"} {
		// torchd archive refuses to write such a config: it is written over a good one.
		writeDigitsArchive(t, "huge_"+name, "model.pt", "handler = \"tensor\"\n", nil)
		cfg := "handler = \"tensor\"\n[[inputs]]\nname = \"input__0\"\ndtype = \"float32\"\nshape = " + shape + "\n"
		if err := os.WriteFile(filepath.Join(store, "pt2", "huge_"+name, "model-config.toml"), []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		r := do(t, "POST", s.mgmt+"/models?url=pt2/huge_"+name+"&initial_workers=1&synchronous=true", "", nil)
		if r.status != 400 || !strings.Contains(string(r.body), "inputs[0].shape") || !strings.Contains(string(r.body), "holds more than the 1024 MiB a sample may") {
			t.Fatalf("%s: %d %s; want a 400 naming inputs[0].shape", name, r.status, r.body)
		}
		t.Logf("%s: %s", name, r.body)
	}
	if got := tensorData(t, do(t, "POST", s.inf+"/predictions/digits_tensor", "application/json", []byte(digitsZeros))); len(got) != 10 {
		t.Fatalf("digits_tensor after the refusals: %v", got)
	}
}

// A Triton repository with dims: [ 100000, 100000, 100000 ] (and a model_warmup of such
// dims), at start-up and dropped into a running poll-mode repository: each such model is
// listed UNAVAILABLE with its reason, and the rest serve (it panicked at every start, and in
// poll mode killed the server within 5 s).
func TestTritonHugeDims(t *testing.T) {
	repo := t.TempDir()
	huge := strings.Replace(tritonDigits, "dims: [ 1, 28, 28 ]", "dims: [ 100000, 100000, 100000 ]", 1)
	warm := tritonDigits + `model_warmup [ { name: "huge" batch_size: 1 inputs { key: "INPUT__0" value: { data_type: TYPE_FP32 dims: [ 100000, 100000, 100000 ] zero_data: true } } } ]`
	repoModel(t, repo, "digits", tritonDigits, "digits", "model.pt", "1")
	repoModel(t, repo, "huge", strings.Replace(huge, `name: "digits"`, `name: "huge"`, 1), "digits", "model.pt", "1")
	repoModel(t, repo, "huge_warmup", strings.Replace(warm, `name: "digits"`, `name: "huge_warmup"`, 1), "digits", "model.pt", "1")
	s := startServer(t, "--model-repository", repo, "--model-control-mode", "poll", "--repository-poll-secs", "0.2")
	idx := settled(t, s)
	check := func(idx map[string]string, names ...string) {
		t.Helper()
		for _, n := range names {
			state := idx[n]
			if state == "" {
				state = idx[n+" 1"]
			}
			if !strings.HasPrefix(state, "UNAVAILABLE") || !strings.Contains(state, "holds more than the 1024 MiB a sample may") {
				t.Fatalf("%s: %q; want UNAVAILABLE with the reason (index %v)", n, state, idx)
			}
		}
		if idx["digits 1"] != "READY" {
			t.Fatalf("digits: %q (index %v)", idx["digits 1"], idx)
		}
		out, _ := v2Out(t, s.inf+"/v2/models/digits/infer", "INPUT__0", []int64{1, 1, 28, 28}, digitsInput(0))
		if len(out) != 10 {
			t.Fatalf("digits answered %v", out)
		}
	}
	check(idx, "huge", "huge_warmup")
	t.Logf("index at start-up: %v", idx)
	// Dropped into the running repository: the poll reads it, lists it, and the server lives.
	repoModel(t, repo, "dropped", strings.Replace(huge, `name: "digits"`, `name: "dropped"`, 1), "digits", "model.pt", "1")
	waitFor(t, answerBound, "the poll to read the dropped model", func() bool {
		idx := repoIndex(t, s)
		return idx["dropped"] != "" || idx["dropped 1"] != ""
	})
	check(settled(t, s), "dropped")
	select {
	case <-s.exited:
		t.Fatalf("the server exited: %v", s.exitErr)
	default:
	}
	if _, err := os.Stat(filepath.Join(repo, "dropped")); err != nil {
		t.Fatal(err)
	}
}

// A Triton model_warmup with a huge count and a short startup_timeout: the model is listed
// UNAVAILABLE when the load is given up, and its worker stops warming up then (it warmed up
// at a core's worth until the server exited); a count past torchd's bound is refused as the
// config is read. The rest serve.
func TestTritonWarmupGivenUp(t *testing.T) {
	repo := t.TempDir()
	warmup := func(name string, count int) string {
		return strings.Replace(tritonDigits, `name: "digits"`, `name: "`+name+`"`, 1) +
			fmt.Sprintf(`model_warmup [ { name: "long" batch_size: 1 count: %d inputs { key: "INPUT__0" value: { data_type: TYPE_FP32 dims: [ 1, 28, 28 ] zero_data: true } } } ]`, count)
	}
	repoModel(t, repo, "digits", tritonDigits, "digits", "model.pt", "1")
	repoModel(t, repo, "long_warmup", warmup("long_warmup", 60000), "digits", "model.pt", "1")
	repoModel(t, repo, "endless_warmup", warmup("endless_warmup", 4000000000), "digits", "model.pt", "1")
	s := startServer(t, "--model-repository", repo, "--startup-timeout", "1")
	idx := settled(t, s)
	if st := idx["long_warmup 1"]; !strings.HasPrefix(st, "UNAVAILABLE") || !strings.Contains(st, "startup_timeout") {
		t.Fatalf("long_warmup: %q (index %v)", st, idx)
	}
	if st := idx["endless_warmup 1"] + idx["endless_warmup"]; !strings.HasPrefix(st, "UNAVAILABLE") || !strings.Contains(st, "warm-up runs torchd does") {
		t.Fatalf("endless_warmup: %q (index %v)", st, idx)
	}
	waitFor(t, answerBound, "the given-up load's worker to stop warming up", func() bool {
		return strings.Contains(s.Log(), `msg="warm-up stopped: the load was given up" model=long_warmup:1`)
	})
	if idx["digits 1"] != "READY" {
		t.Fatalf("digits: %q", idx["digits 1"])
	}
	if out, _ := v2Out(t, s.inf+"/v2/models/digits/infer", "INPUT__0", []int64{1, 1, 28, 28}, digitsInput(0)); len(out) != 10 {
		t.Fatalf("digits answered %v", out)
	}
}
