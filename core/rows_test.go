package core_test

import (
	"fmt"
	"io"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/core/coretest"
	"github.com/torchd/torchd/handlers"
)

func init() {
	// rows_fake preprocesses a payload "x" into the row [x, -x], in the memory core lends
	// (handlers.Request.Row) where it lends some, as the image handlers do; "x,y" is two
	// such rows, which a slab of rows of one does not give.
	handlers.Register("rows_fake", func(handlers.Context) (handlers.Handler, error) { return rowsFake{}, nil })
}

type rowsFake struct{}

func (rowsFake) Preprocess(r *handlers.Request) (*handlers.Sample, error) {
	var xs []float32
	for _, f := range strings.Split(string(r.Inputs[0].Data), ",") {
		x, err := strconv.ParseFloat(f, 32)
		if err != nil {
			return nil, handlers.BadInput("not a number: %q", f)
		}
		xs = append(xs, float32(x), -float32(x))
	}
	items := len(xs) / 2
	t := coretest.Floats([]int64{int64(items), 2}, xs...)
	s := &handlers.Sample{Items: items, Tensors: []handlers.Tensor{t}, Release: func() {}}
	if r.Row != nil {
		if mem, release := r.Row(len(t.Data)); mem != nil {
			copy(mem, t.Data)
			s.Tensors[0].Data, s.Release = mem, release
		}
	}
	return s, nil
}

func (rowsFake) Postprocess(*handlers.Sample, []handlers.Tensor) (*handlers.Response, error) {
	return &handlers.Response{}, nil
}

// payload is a Decode of one payload through the handler.
func payload(body string) func(*core.ModelVersion) (core.Input, error) {
	return func(*core.ModelVersion) (core.Input, error) {
		return core.Input{Payloads: &handlers.Request{Inputs: []handlers.Payload{{Name: "body", Data: []byte(body)}}}}, nil
	}
}

// wantDoubled fails t unless out holds xs doubled.
func wantDoubled(t *testing.T, what string, out []handlers.Tensor, xs ...float32) {
	t.Helper()
	if len(out) != 1 {
		t.Errorf("%s: %d outputs, want 1", what, len(out))
		return
	}
	got := coretest.Float32s(out[0])
	if len(got) != len(xs) {
		t.Errorf("%s: got %v, want %v doubled", what, got, xs)
		return
	}
	for i, x := range xs {
		if math.Abs(float64(got[i]-2*x)) > 1e-6 {
			t.Errorf("%s: got %v, want %v doubled", what, got, xs)
			return
		}
	}
}

func rowsRegistry(t *testing.T) (*core.Registry, *coretest.Runtime) {
	rt := &coretest.Runtime{}
	r := core.NewRegistry(core.Options{Defaults: coretest.Defaults, Runtimes: []core.Runtime{rt}, DispatchAlone: true,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	t.Cleanup(r.Close)
	return r, rt
}

// Requests preprocessed into the rows core lends run in place: their batch is not copied
// together. A batch ends where its slab of rows does, so after a short batch the next one
// ends there, and the one after fills a slab again: here batch_size 4, a lone request
// (place 0), then six queued behind it run as places 1-3 and 4-6, each batch in place.
func TestServeRowsRunInPlace(t *testing.T) {
	r, rt := rowsRegistry(t)
	v := coretest.Add(t, r, "m", coretest.Archive(t, "rows_fake", "batch_size = 4\nmax_batch_delay = 3600000\n", nil))
	m := rt.Model("m", "1")
	warm := len(m.Batches())
	held, release := m.Hold()
	defer release()
	type answer struct {
		x   float32
		res core.Result
		err error
	}
	answers := make(chan answer, 7)
	serve := func(x float32) {
		go func() {
			res, err := r.Serve(&core.Request{Model: "m", Raw: true, Decode: payload(fmt.Sprint(x))})
			answers <- answer{x, res, err}
		}()
	}
	serve(1)
	<-held
	for i := range 6 {
		serve(float32(i + 2))
	}
	coretest.WaitFor(t, "six queued requests", func() bool { return v.Pending() == 6 })
	release()
	for range 7 {
		a := <-answers
		if a.err != nil {
			t.Fatalf("request %v: %v", a.x, a.err)
		}
		wantDoubled(t, fmt.Sprint("request ", a.x), a.res.Out, a.x, -a.x)
	}
	if got := fmt.Sprint(m.Batches()[warm:]); got != "[1 3 3]" {
		t.Errorf("batches %s, want [1 3 3]: the lone request, then the rest of its slab, then the next slab's", got)
	}
	if got := m.InPlace(); got != 2 {
		t.Errorf("%d batches ran in place, want 2", got)
	}
}

// A request whose input does not fit its slab's rows (two rows, where the slab's are of one)
// uses its own memory, and batches with the others by a copy, each answered its own rows.
func TestServeRowsOfAnotherSizeAreCopied(t *testing.T) {
	r, rt := rowsRegistry(t)
	coretest.Add(t, r, "m", coretest.Archive(t, "rows_fake", "batch_size = 4\nmax_batch_delay = 3600000\n", nil))
	m := rt.Model("m", "1")
	held, release := m.Hold()
	defer release()
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Go(func() {
		res, err := r.Serve(&core.Request{Model: "m", Raw: true, Decode: payload("1")})
		if err != nil {
			t.Error(err)
			return
		}
		wantDoubled(t, "the lone request", res.Out, 1, -1)
	})
	<-held
	for i, body := range []string{"2", "3,4", "6"} {
		wg.Go(func() {
			res, err := r.Serve(&core.Request{Model: "m", Raw: true, Decode: payload(body)})
			if err != nil {
				t.Errorf("request %d: %v", i, err)
				return
			}
			if body == "3,4" {
				wantDoubled(t, body, res.Out, 3, -3, 4, -4)
			} else {
				x, _ := strconv.ParseFloat(body, 32)
				wantDoubled(t, body, res.Out, float32(x), -float32(x))
			}
		})
	}
	go func() { wg.Wait(); close(done) }()
	coretest.WaitFor(t, "three queued requests", func() bool { return len(m.Batches()) > 0 && pending(r) == 3 })
	release()
	<-done
	if got := m.InPlace(); got != 0 {
		t.Errorf("%d batches ran in place, want 0: one request's row is of another size", got)
	}
}

func pending(r *core.Registry) int {
	v, err := r.Get("m", "1")
	if err != nil {
		return -1
	}
	return v.Pending()
}
