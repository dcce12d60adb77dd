package core_test

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/core/coretest"
	"github.com/torchd/torchd/handlers"
)

// These tests drive Registry.Serve, the one call every protocol makes, through the runtime
// double of package coretest: what Serve does with a request (its queue, its batch, its
// deadline, its errors' kinds) does not depend on what the model computes. Each state is
// reached by holding the model's worker, never by a fixed wait.

// rows is a Decode that hands the model a float32 tensor of rows of two, as a front-end
// that read the tensors does.
func rows(xs ...float32) func(*core.ModelVersion) (core.Input, error) {
	return func(*core.ModelVersion) (core.Input, error) {
		t := coretest.Floats([]int64{int64(len(xs) / 2), 2}, xs...)
		return core.Input{Sample: &handlers.Sample{Items: len(xs) / 2, Tensors: []handlers.Tensor{t}}}, nil
	}
}

// serveAsync serves req in its own goroutine; its error arrives on the channel.
func serveAsync(r *core.Registry, req *core.Request) <-chan error {
	done := make(chan error, 1)
	go func() { _, err := r.Serve(req); done <- err }()
	return done
}

// wantKind fails t unless err is of kind with a message containing part.
func wantKind(t *testing.T, what string, err, kind error, part string) {
	t.Helper()
	if !errors.Is(err, kind) || !strings.Contains(err.Error(), part) {
		t.Errorf("%s: error %v, want %q containing %q", what, err, kind, part)
	}
}

// failures returns the version's failed requests by reason, and its answered ones.
func failures(t *testing.T, r *core.Registry, name string) (map[string]uint64, uint64) {
	t.Helper()
	st, err := r.Statistics(name, "1")
	if err != nil {
		t.Fatal(err)
	}
	return st[0].Failures, st[0].Requests.Answered.Count
}

// Concurrent requests within the batch delay run as one batch, and each gets its own rows
// of the output.
func TestServeBatchesAndSplitsAnswers(t *testing.T) {
	rt := &coretest.Runtime{}
	r := coretest.NewRegistry(t, rt)
	coretest.Add(t, r, "m", coretest.Archive(t, "tensor", "batch_size = 4\nmax_batch_delay = 60000\n"+coretest.XConfig, nil))
	warm := len(rt.Model("m", "1").Batches())
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x := float32(i + 1)
			res, err := r.Serve(&core.Request{Model: "m", Raw: true, Decode: rows(x, -x)})
			if err != nil {
				t.Error(err)
				return
			}
			got := coretest.Float32s(res.Out[0])
			if len(got) != 2 || math.Abs(float64(got[0]-2*x)) > 1e-6 || math.Abs(float64(got[1]+2*x)) > 1e-6 {
				t.Errorf("request %v got %v, want its own row doubled", x, got)
			}
			if res.BatchSize != 4 || res.Version == nil || res.Version.Name != "m" {
				t.Errorf("request %v: batch of %d on %v, want 4 on m", x, res.BatchSize, res.Version)
			}
		}()
	}
	wg.Wait()
	if b := rt.Model("m", "1").Batches()[warm:]; len(b) != 1 || b[0] != 4 {
		t.Errorf("batches %v, want the four requests in one", b)
	}
	if _, answered := failures(t, r, "m"); answered != 4 {
		t.Errorf("%d requests answered in the statistics, want 4", answered)
	}
}

// A request queued behind a busy worker is answered in its turn, in a batch of its own
// requests once the worker is free: the batcher takes what waits, up to batch_size.
func TestServeQueuedRequestsBatchWhenTheWorkerFrees(t *testing.T) {
	rt := &coretest.Runtime{}
	r := coretest.NewRegistry(t, rt)
	v := coretest.Add(t, r, "m", coretest.Archive(t, "tensor", "batch_size = 3\nmax_batch_delay = 0\n"+coretest.XConfig, nil))
	m := rt.Model("m", "1")
	held, release := m.Hold()
	first := serveAsync(r, &core.Request{Model: "m", Raw: true, Decode: rows(1, 1)})
	<-held
	var queued []<-chan error
	for range 3 {
		queued = append(queued, serveAsync(r, &core.Request{Model: "m", Raw: true, Decode: rows(2, 2)}))
	}
	coretest.WaitFor(t, "three queued requests", func() bool { return v.Pending() == 3 })
	release()
	for _, done := range append(queued, first) {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	b := m.Batches()
	if got := b[len(b)-1]; got != 3 {
		t.Errorf("batches %v: want the three queued requests in one batch", b)
	}
}

// A full queue answers ErrQueueFull at once, and counts it as rejected.
func TestServeQueueFull(t *testing.T) {
	rt := &coretest.Runtime{}
	r := coretest.NewRegistry(t, rt)
	v := coretest.Add(t, r, "m", coretest.Archive(t, "tensor", "job_queue_size = 2\n"+coretest.XConfig, nil))
	held, release := rt.Model("m", "1").Hold()
	defer release()
	first := serveAsync(r, &core.Request{Model: "m", Raw: true, Decode: rows(1, 1)})
	<-held
	a, b := serveAsync(r, &core.Request{Model: "m", Raw: true, Decode: rows(1, 1)}), serveAsync(r, &core.Request{Model: "m", Raw: true, Decode: rows(1, 1)})
	coretest.WaitFor(t, "two queued requests", func() bool { return v.Pending() == 2 })
	decoded := false
	_, err := r.Serve(&core.Request{Model: "m", Raw: true, Decode: func(mv *core.ModelVersion) (core.Input, error) {
		decoded = true
		return rows(1, 1)(mv)
	}})
	wantKind(t, "a third request", err, core.ErrQueueFull, "job queue is full (job_queue_size 2)")
	if decoded {
		t.Error("a request refused for a full queue was decoded: its input is read only once it holds a place")
	}
	release()
	for _, done := range []<-chan error{first, a, b} {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if f, _ := failures(t, r, "m"); f[core.FailRejected] != 1 {
		t.Errorf("failures %v, want one %s", f, core.FailRejected)
	}
}

// A request answered 504 while queued gives its queue place back at once: the job stays
// in the queue until a worker drops it, but a later request is queued in its place.
func TestServeDeadlineGivesBackQueuePlace(t *testing.T) {
	rt := &coretest.Runtime{}
	r := coretest.NewRegistry(t, rt)
	v := coretest.Add(t, r, "m", coretest.Archive(t, "tensor", "job_queue_size = 1\nbatch_size = 1\n"+coretest.XConfig, nil))
	m := rt.Model("m", "1")
	warm := len(m.Batches())
	held, release := m.Hold()
	defer release()
	first := serveAsync(r, &core.Request{Model: "m", Raw: true, Decode: rows(1, 1)})
	<-held
	_, err := r.Serve(&core.Request{Model: "m", Raw: true, Decode: rows(2, 2),
		Call: core.Call{Timeout: func() (time.Duration, error) { return 20 * time.Millisecond, nil }}})
	wantKind(t, "a request past its limit", err, core.ErrDeadline, "within its timeout")
	if n := v.Pending(); n != 0 {
		t.Fatalf("%d requests counted as queued after the only queued one was answered 504", n)
	}
	third := serveAsync(r, &core.Request{Model: "m", Raw: true, Decode: rows(3, 3)})
	coretest.WaitFor(t, "the next request queued in the freed place", func() bool { return v.Pending() == 1 })
	release()
	for _, done := range []<-chan error{first, third} {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if b := m.Batches()[warm:]; len(b) != 2 {
		t.Errorf("batches %v: want the first and the third request's, the abandoned one dropped", b)
	}
}

// A request's deadline is the earliest of response_timeout, its input's Timeout and its
// call's own limit; one that passes while queued is ErrDeadline, and the worker's later
// answer goes to no one.
func TestServeDeadlines(t *testing.T) {
	rt := &coretest.Runtime{}
	r := coretest.NewRegistry(t, rt)
	coretest.Add(t, r, "m", coretest.Archive(t, "tensor", coretest.XConfig, nil))
	m := rt.Model("m", "1")
	const limit = 20 * time.Millisecond
	for _, c := range []struct {
		name string
		req  *core.Request
		part string
	}{
		{"the call's own limit", &core.Request{Model: "m", Raw: true, Decode: rows(1, 1),
			Call: core.Call{Timeout: func() (time.Duration, error) { return limit, nil }}}, "within its timeout (20ms"},
		{"the input's timeout", &core.Request{Model: "m", Raw: true, Decode: func(v *core.ModelVersion) (core.Input, error) {
			in, err := rows(1, 1)(v)
			in.Timeout = limit
			return in, err
		}}, "did not answer within its timeout"},
	} {
		t.Run(c.name, func(t *testing.T) {
			held, release := m.Hold()
			first := serveAsync(r, &core.Request{Model: "m", Raw: true, Decode: rows(1, 1)})
			<-held
			_, err := r.Serve(c.req)
			wantKind(t, "a request past its limit", err, core.ErrDeadline, c.part)
			release()
			if err := <-first; err != nil {
				t.Fatal(err)
			}
		})
	}
	// A malformed limit is the client's error.
	_, err := r.Serve(&core.Request{Model: "m", Raw: true, Decode: rows(1, 1),
		Call: core.Call{Timeout: func() (time.Duration, error) { return 0, errors.New("timeout header: not a duration") }}})
	wantKind(t, "a malformed limit", err, core.ErrBadInput, "not a duration")
	if f, _ := failures(t, r, "m"); f[core.FailRejected] < 2 {
		t.Errorf("failures %v, want the deadlines as %s", f, core.FailRejected)
	}
}

// A client gone while its request is queued gets ErrClientGone and its request never runs;
// a request answered after its client left counts as canceled.
func TestServeClientGone(t *testing.T) {
	rt := &coretest.Runtime{}
	r := coretest.NewRegistry(t, rt)
	v := coretest.Add(t, r, "m", coretest.Archive(t, "tensor", coretest.XConfig, nil))
	m := rt.Model("m", "1")
	held, release := m.Hold()
	first := serveAsync(r, &core.Request{Model: "m", Raw: true, Decode: rows(1, 1)})
	<-held
	var gone atomic.Bool
	left := serveAsync(r, &core.Request{Model: "m", Raw: true, Decode: rows(7, 7), Call: core.Call{Gone: gone.Load}})
	coretest.WaitFor(t, "the request queued", func() bool { return v.Pending() == 1 })
	before := len(m.Batches())
	gone.Store(true)
	release()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	wantKind(t, "a client gone while queued", <-left, core.ErrClientGone, "")
	if after := len(m.Batches()); after != before {
		t.Errorf("%d batches ran after the client left, want none", after-before)
	}

	// Answered, but no one read it.
	var late atomic.Bool
	_, err := r.Serve(&core.Request{Model: "m", Raw: true, Decode: rows(1, 1), Call: core.Call{Gone: late.Load},
		Encode: func(*core.Result) error { late.Store(true); return nil }})
	if err != nil {
		t.Fatalf("a request its client left after the forward: %v (it was answered)", err)
	}
	if f, _ := failures(t, r, "m"); f[core.FailCanceled] != 2 {
		t.Errorf("failures %v, want two %s", f, core.FailCanceled)
	}
}

// Requests queued when their model is unregistered are answered, not dropped: served, if the
// stopping worker took them first (it picks between its stop and the queue at random), else
// ErrUnregistered. The model is closed, and the name is then not found.
func TestServeUnregisterWhileQueued(t *testing.T) {
	rt := &coretest.Runtime{}
	r := coretest.NewRegistry(t, rt)
	v := coretest.Add(t, r, "m", coretest.Archive(t, "tensor", coretest.XConfig, nil))
	m := rt.Model("m", "1")
	held, release := m.Hold()
	first := serveAsync(r, &core.Request{Model: "m", Raw: true, Decode: rows(1, 1)})
	<-held
	queued := []<-chan error{
		serveAsync(r, &core.Request{Model: "m", Raw: true, Decode: rows(2, 2)}),
		serveAsync(r, &core.Request{Model: "m", Raw: true, Decode: rows(3, 3)}),
	}
	coretest.WaitFor(t, "two queued requests", func() bool { return v.Pending() == 2 })
	unregistered := make(chan error, 1)
	go func() { unregistered <- r.Unregister("m", "1") }()
	coretest.WaitFor(t, "the model out of the registry", func() bool {
		_, err := r.Get("m", "")
		return errors.Is(err, core.ErrModelNotFound)
	})
	release()
	if err := <-first; err != nil {
		t.Errorf("the running request: %v, want its answer", err)
	}
	for _, done := range queued {
		if err := <-done; err != nil {
			wantKind(t, "a queued request", err, core.ErrUnregistered, "was unregistered")
		}
	}
	if err := <-unregistered; err != nil {
		t.Fatal(err)
	}
	if !m.Closed() {
		t.Error("the unregistered model was not closed")
	}
	_, err := r.Serve(&core.Request{Model: "m", Raw: true, Decode: rows(1, 1)})
	wantKind(t, "after unregister", err, core.ErrModelNotFound, "")
}

// Each way a request can fail reaches the front-end as its kind, with a message that says
// why; a refusal before any work counts nothing, and the model goes on serving after each.
func TestServeErrorKinds(t *testing.T) {
	rt := &coretest.Runtime{}
	r := coretest.NewRegistry(t, rt)
	coretest.Add(t, r, "m", coretest.Archive(t, "tensor", coretest.XConfig, nil))
	// "p" takes payloads through a handler that takes no tensors.
	coretest.Add(t, r, "p", coretest.Archive(t, "text_classifier_fake", "", nil))
	rt.Model("m", "1").FailOn(13)
	tooLarge := core.Errorf(core.ErrTooLarge, "the body is over max_request_size")
	for _, c := range []struct {
		name    string
		req     *core.Request
		kind    error
		part    string
		counted bool
	}{
		{"no such model", &core.Request{Model: "nope", Decode: rows(1, 1)}, core.ErrModelNotFound, "nope", false},
		{"no such version", &core.Request{Model: "m", Version: "9", Decode: rows(1, 1)}, core.ErrVersionNotFound, "9", false},
		{"refused by the protocol's check", &core.Request{Model: "m", Decode: rows(1, 1),
			Check: func(*core.ModelVersion) error { return core.Errorf(core.ErrUnsupported, "not an embedding model") }},
			core.ErrUnsupported, "not an embedding model", false},
		{"an explanation the model cannot give", &core.Request{Model: "m", Explain: true, Decode: rows(1, 1)}, core.ErrUnsupported, "explain", false},
		{"undecodable input", &core.Request{Model: "m", Decode: func(*core.ModelVersion) (core.Input, error) {
			return core.Input{}, errors.New("the body is not JSON")
		}}, core.ErrBadInput, "the body is not JSON", true},
		{"input of a kind of its own", &core.Request{Model: "m", Decode: func(*core.ModelVersion) (core.Input, error) {
			return core.Input{}, tooLarge
		}}, core.ErrTooLarge, "max_request_size", true},
		{"no input", &core.Request{Model: "m", Decode: func(*core.ModelVersion) (core.Input, error) {
			return core.Input{}, nil
		}}, core.ErrBadInput, "no input", true},
		{"tensors to a handler that takes none", &core.Request{Model: "p", Decode: func(*core.ModelVersion) (core.Input, error) {
			x := coretest.Floats([]int64{1, 2}, 1, 1)
			x.Name = "x"
			return core.Input{Tensor: &x}, nil
		}}, core.ErrUnsupported, "does not take tensors", true},
		{"a tensor the handler refuses", &core.Request{Model: "m", Decode: func(*core.ModelVersion) (core.Input, error) {
			x := coretest.Floats([]int64{1, 3}, 1, 1, 1)
			x.Name = "x"
			return core.Input{Tensor: &x}, nil
		}}, core.ErrBadInput, `input "x"`, true},
		{"the model fails", &core.Request{Model: "m", Raw: true, Decode: rows(13, 13)}, core.ErrInference, "failing value", true},
		{"the answer cannot be encoded", &core.Request{Model: "m", Raw: true, Decode: rows(1, 1),
			Encode: func(*core.Result) error { return errors.New("the output has no name") }}, core.ErrInference, "no name", true},
		{"an encoding error of a kind of its own", &core.Request{Model: "m", Raw: true, Decode: rows(1, 1),
			Encode: func(*core.Result) error { return core.Errorf(core.ErrBadInput, "binary_data_output of a string") }},
			core.ErrBadInput, "binary_data_output", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, before := counted(r)
			_, err := r.Serve(c.req)
			wantKind(t, c.name, err, c.kind, c.part)
			for _, k := range core.Kinds {
				if k != c.kind && errors.Is(err, k) {
					t.Errorf("the error is also of kind %q", k)
				}
			}
			if _, after := counted(r); (after > before) != c.counted {
				t.Errorf("statistics went from %d to %d requests; counted: want %v", before, after, c.counted)
			}
			if _, err := r.Serve(&core.Request{Model: "m", Raw: true, Decode: rows(1, 1)}); err != nil {
				t.Errorf("the model after the failure: %v", err)
			}
		})
	}
}

// counted sums the answered and failed requests of every version.
func counted(r *core.Registry) (answered, all uint64) {
	st, _ := r.Statistics("", "")
	for _, s := range st {
		answered += s.Requests.Answered.Count
		all += s.Requests.Answered.Count + s.Requests.Failed.Count
	}
	return answered, all
}

// A version with no worker running answers ErrNoWorker, and serves again once scaled up.
func TestServeNoWorker(t *testing.T) {
	rt := &coretest.Runtime{}
	r := coretest.NewRegistry(t, rt)
	coretest.Add(t, r, "m", coretest.Archive(t, "tensor", coretest.XConfig, nil))
	if _, err := r.Scale("m", "1", 0, 0, true); err != nil {
		t.Fatal(err)
	}
	_, err := r.Serve(&core.Request{Model: "m", Raw: true, Decode: rows(1, 1)})
	wantKind(t, "no worker", err, core.ErrNoWorker, "scale its workers up")
	if _, err := r.Scale("m", "1", 1, 1, true); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Serve(&core.Request{Model: "m", Raw: true, Decode: rows(1, 1)}); err != nil {
		t.Fatalf("after scaling up: %v", err)
	}
}

// A model still loading answers ErrLoading, and the runtime's load failure ErrLoadFailed
// with its reason.
func TestServeLoadingAndLoadFailed(t *testing.T) {
	rt := &coretest.Runtime{LoadErr: errors.New("the graph is truncated")}
	r := coretest.NewRegistry(t, rt)
	_, err := r.Add("bad", "1", core.RegisterRequest{Name: "bad", Synchronous: true}, coretest.Archive(t, "tensor", coretest.XConfig, nil))
	wantKind(t, "a load the runtime refuses", err, core.ErrLoadFailed, "the graph is truncated")
	_, err = r.Serve(&core.Request{Model: "bad", Decode: rows(1, 1)})
	wantKind(t, "serving a model that failed to load", err, core.ErrModelNotFound, "")
}

// Request.Version "" is the default version; a named version serves that version.
func TestServeVersions(t *testing.T) {
	rt := &coretest.Runtime{}
	r := coretest.NewRegistry(t, rt)
	coretest.Add(t, r, "m", coretest.Archive(t, "tensor", coretest.XConfig, nil))
	if _, err := r.Add("m", "2", core.RegisterRequest{Name: "m", Synchronous: true}, coretest.Archive(t, "tensor", coretest.XConfig, nil)); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ asked, want string }{{"", "1"}, {"1", "1"}, {"2", "2"}} {
		res, err := r.Serve(&core.Request{Model: "m", Version: c.asked, Raw: true, Decode: rows(1, 1)})
		if err != nil {
			t.Fatal(err)
		}
		if res.Version.Version != c.want {
			t.Errorf("version %q served by %s, want %s", c.asked, res.Version.Version, c.want)
		}
	}
	if err := r.SetDefault("m", "2"); err != nil {
		t.Fatal(err)
	}
	res, err := r.Serve(&core.Request{Model: "m", Raw: true, Decode: rows(1, 1)})
	if err != nil || res.Version.Version != "2" {
		t.Errorf("the default after SetDefault: %v %v, want version 2", res.Version, err)
	}
}

func init() {
	// text_classifier_fake is a handler that takes payloads only (no PreprocessTensor).
	handlers.Register("text_classifier_fake", func(handlers.Context) (handlers.Handler, error) { return payloadOnly{}, nil })
}

type payloadOnly struct{}

func (payloadOnly) Preprocess(r *handlers.Request) (*handlers.Sample, error) {
	if len(r.Inputs) == 0 {
		return nil, fmt.Errorf("no payload")
	}
	x := coretest.Floats([]int64{1, 2}, 1, 1)
	return &handlers.Sample{Items: 1, Tensors: []handlers.Tensor{x}}, nil
}

func (payloadOnly) Postprocess(_ *handlers.Sample, out []handlers.Tensor) (*handlers.Response, error) {
	return &handlers.Response{}, nil
}

// With DispatchAlone (the daemon's default), a client asking one request at a time is never
// held for the batch delay: each request is alone in its model when its worker takes it,
// the previous batch having stopped counting before its answer went.
func TestServeLoneRequestsGoAtOnce(t *testing.T) {
	rt := &coretest.Runtime{}
	r := core.NewRegistry(core.Options{Defaults: coretest.Defaults, Runtimes: []core.Runtime{rt}, DispatchAlone: true,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	t.Cleanup(r.Close)
	coretest.Add(t, r, "m", coretest.Archive(t, "tensor", "batch_size = 8\nmax_batch_delay = 3600000\nmin_workers = 2\n"+coretest.XConfig, nil))
	for i := range 5 {
		done := make(chan *core.Result, 1)
		go func() {
			res, err := r.Serve(&core.Request{Model: "m", Raw: true, Decode: rows(1, 2)})
			if err != nil {
				t.Error(err)
			}
			done <- &res
		}()
		select {
		case res := <-done:
			if res.BatchSize != 1 {
				t.Fatalf("request %d: batch of %d, want 1", i, res.BatchSize)
			}
		case <-time.After(time.Minute):
			t.Fatalf("request %d, alone in its model, waited for the batch delay (an hour)", i)
		}
	}
}
