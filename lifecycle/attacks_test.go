package lifecycle

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/backends/libtorch"
	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/core/coretest"
	"github.com/torchd/torchd/handlers"
)

// The attacks of issue 50 through a Triton repository's declared shapes and warm-up: each
// dimension in range, their product an overflow (a makeslice panic that took the server
// down when a worker built its warm-up sample), or a warm-up that never ends. The model is
// listed UNAVAILABLE with its reason; the rest serve. docs/guide/attacks.md lists them.

// repoOf writes a repository holding the zoo's digits CNN under each name with its config.
func repoOf(t *testing.T, dir string, configs map[string]string) {
	t.Helper()
	model, err := os.ReadFile(filepath.Join("..", "models", "out", "digits", "model.pt"))
	if err != nil {
		t.Fatalf("no zoo model (run make models): %v", err)
	}
	for name, config := range configs {
		if err := os.MkdirAll(filepath.Join(dir, name, "1"), 0o755); err != nil {
			t.Fatal(err)
		}
		config = strings.Replace(config, `name: "digits"`, `name: "`+name+`"`, 1)
		if err := os.WriteFile(filepath.Join(dir, name, "config.pbtxt"), []byte(config), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name, "1", "model.pt"), model, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// syncBuffer is a log that the serving goroutines write while the test reads it.
type syncBuffer = coretest.LogBuffer

// repoService serves dir in mode over LibTorch with startup_timeout, logging to log.
func repoService(t *testing.T, dir, mode string, startup time.Duration, log *syncBuffer) (*Service, *core.Registry) {
	t.Helper()
	l := slog.New(slog.NewTextHandler(log, nil))
	d := coretest.Defaults
	d.StartupTimeout = archive.Of(startup)
	reg := core.NewRegistry(core.Options{Log: l, Runtimes: []core.Runtime{libtorch.Backend{}}, Defaults: d})
	t.Cleanup(reg.Close)
	p := New(Config{Registry: reg, ControlMode: mode, Log: l})
	t.Cleanup(p.Stop)
	p.OpenRepository(dir)
	return p, reg
}

// digitsServe sends digits one image of zeros and checks its ten logits.
func digitsServe(t *testing.T, reg *core.Registry) {
	t.Helper()
	res, err := reg.Serve(&core.Request{Model: "digits", Raw: true, Decode: func(*core.ModelVersion) (core.Input, error) {
		return core.Input{Sample: &handlers.Sample{Items: 1, Tensors: []handlers.Tensor{coretest.Floats([]int64{1, 1, 28, 28}, make([]float32, 784)...)}}}, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Out) != 1 || len(coretest.Float32s(res.Out[0])) != 10 {
		t.Fatalf("digits answered %+v", res.Out)
	}
}

// A repository with dims: [ 100000, 100000, 100000 ] (and a model_warmup of such dims), at
// start-up and dropped into a polled repository: each such model is listed UNAVAILABLE with
// its reason, and the rest serve (it panicked at every start, and in poll mode killed the
// server within 5 s).
func TestTritonHugeDims(t *testing.T) {
	dir := t.TempDir()
	huge := strings.Replace(digitsConfig, "dims: [ 1, 28, 28 ]", "dims: [ 100000, 100000, 100000 ]", 1)
	warm := digitsConfig + `model_warmup [ { name: "huge" batch_size: 1 inputs { key: "INPUT__0" value: { data_type: TYPE_FP32 dims: [ 100000, 100000, 100000 ] zero_data: true } } } ]`
	repoOf(t, dir, map[string]string{"digits": digitsConfig, "huge": huge, "huge_warmup": warm})
	p, reg := repoService(t, dir, ControlPoll, time.Minute, &syncBuffer{})
	p.repo.LoadStartup(nil) // its error joins the two refused models'
	check := func(names ...string) {
		t.Helper()
		idx := index(t, p, false)
		for _, n := range names {
			if state := idx[n+" 1"] + idx[n+" "]; !strings.HasPrefix(state, "UNAVAILABLE") || !strings.Contains(state, "holds more than the 1024 MiB a sample may") {
				t.Fatalf("%s: %q; want UNAVAILABLE with the reason (index %v)", n, state, idx)
			}
		}
		if idx["digits 1"] != "READY " {
			t.Fatalf("digits: %q (index %v)", idx["digits 1"], idx)
		}
		digitsServe(t, reg)
	}
	check("huge", "huge_warmup")
	// Dropped into the running repository: the poll reads it, lists it, and serving goes on.
	repoOf(t, dir, map[string]string{"dropped": huge})
	p.Poll()
	check("dropped")
}

// A model_warmup with a huge count and a short startup_timeout: the model is listed
// UNAVAILABLE when the load is given up, and its worker stops warming up then (it warmed up
// at a core's worth until the server exited); a count past torchd's bound is refused as the
// config is read. The rest serve.
func TestTritonWarmupGivenUp(t *testing.T) {
	dir := t.TempDir()
	warmup := func(count int) string {
		return digitsConfig + fmt.Sprintf(`model_warmup [ { name: "long" batch_size: 1 count: %d inputs { key: "INPUT__0" value: { data_type: TYPE_FP32 dims: [ 1, 28, 28 ] zero_data: true } } } ]`, count)
	}
	repoOf(t, dir, map[string]string{"digits": digitsConfig, "long_warmup": warmup(60000), "endless_warmup": warmup(4000000000)})
	log := &syncBuffer{}
	p, reg := repoService(t, dir, ControlNone, time.Second, log)
	p.repo.LoadStartup(nil)
	idx := index(t, p, false)
	if st := idx["long_warmup 1"]; !strings.HasPrefix(st, "UNAVAILABLE") || !strings.Contains(st, "startup_timeout") {
		t.Fatalf("long_warmup: %q (index %v)", st, idx)
	}
	if st := idx["endless_warmup 1"] + idx["endless_warmup "]; !strings.HasPrefix(st, "UNAVAILABLE") || !strings.Contains(st, "warm-up runs torchd does") {
		t.Fatalf("endless_warmup: %q (index %v)", st, idx)
	}
	coretest.WaitFor(t, "the given-up load's worker to stop warming up", func() bool {
		return strings.Contains(log.String(), `msg="warm-up stopped: the load was given up" model=long_warmup:1`)
	})
	if idx["digits 1"] != "READY " {
		t.Fatalf("digits: %q", idx["digits 1"])
	}
	digitsServe(t, reg)
}

// A start-up model that loads but fails its warm-up forward keeps the service unready (and
// /ping unhealthy), listed UNAVAILABLE with LibTorch's message; the other start-up model
// serves. (Registered through the API: backends/libtorch's TestWarmupFailure.)
func TestStartupModelFailsWarmup(t *testing.T) {
	store := testStore(t)
	dir := filepath.Join(store, "badwarm")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	slow, err := filepath.Abs(filepath.Join("..", "models", "out", "slow", "model.pt"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(slow, filepath.Join(dir, "model.pt")); err != nil {
		t.Fatal(err)
	}
	// slow indexes x[:, 1]: a declared input of width 1 makes its warm-up forward raise.
	toml := "handler = \"tensor\"\nserialized_file = \"model.pt\"\n[[inputs]]\nname = \"input__0\"\ndtype = \"float32\"\nshape = [-1, 1]\n"
	if err := os.WriteFile(filepath.Join(dir, "model-config.toml"), []byte(toml), 0o644); err != nil {
		t.Fatal(err)
	}
	s, reg := testService(t, store, ControlNone, "")
	startAndWait(t, s, Startup{Models: "digits, badwarm"})
	if s.Ready() {
		t.Fatal("ready with a start-up model that failed its warm-up")
	}
	if st := index(t, s, false)["badwarm "]; !strings.HasPrefix(st, "UNAVAILABLE") || !strings.Contains(st, "failed its warm-up forward") || !strings.Contains(st, "index 1 out of range") {
		t.Fatalf("badwarm: %q", st)
	}
	digitsServe(t, reg)
}
