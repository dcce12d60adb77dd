// Package handlertest has a handler for tests of the serving path (packages core and daemon):
// Probe serves as a built-in handler does and calls a test's function on the worker's thread
// before each forward, where the test can see the intra-op threads the forward runs with or
// hold the worker. It goes through the handlers' own extension points (Register, ModelBinder),
// so the serving code has no hooks for tests. Production code must not import it.
package handlertest

import (
	"fmt"
	"sync/atomic"

	"github.com/torchd/torchd/handlers"
	"github.com/torchd/torchd/torch"
)

// Probe is a handler registered under a name of its own that serves as the built-in handler it
// wraps.
type Probe struct {
	before atomic.Pointer[func(threads int)]
}

// Register registers name as a handler that serves as the built-in handler base does (its
// options, preprocessing, batching and answers) and returns its probe. An archive names it in
// its model-config.toml (handler = name).
func Register(name, base string) *Probe {
	p := &Probe{}
	handlers.Register(name, func(ctx handlers.Context) (handlers.Handler, error) {
		h, err := handlers.New(base, ctx)
		if err != nil {
			return nil, err
		}
		if _, ok := h.(handlers.ModelBinder); ok {
			// Its Infer expects the model its BindModel returned, not the probe's.
			return nil, fmt.Errorf("handlertest: %s binds its model itself, which a probe cannot wrap", base)
		}
		return p.wrap(h), nil
	})
	return p
}

// Before makes every forward of the models this probe's handler serves, warm-up forwards
// included, call f first on the worker's thread, with the intra-op threads LibTorch reports
// there; nil stops it. f may block: the worker waits.
func (p *Probe) Before(f func(threads int)) {
	if f == nil {
		p.before.Store(nil)
		return
	}
	p.before.Store(&f)
}

// wrap returns h with its model bound to the probe, keeping the optional interfaces h has
// (TensorPreprocessor, Warmer, Inferer), since the serving path looks for them.
func (p *Probe) wrap(h handlers.Handler) handlers.Handler {
	b := &binder{Handler: h, p: p}
	tp, isTP := h.(handlers.TensorPreprocessor)
	w, isW := h.(handlers.Warmer)
	if inf, ok := h.(handlers.Inferer); ok {
		switch {
		case isTP && isW:
			return struct {
				*binder
				handlers.Inferer
				handlers.TensorPreprocessor
				handlers.Warmer
			}{b, inf, tp, w}
		case isW:
			return struct {
				*binder
				handlers.Inferer
				handlers.Warmer
			}{b, inf, w}
		}
		return struct {
			*binder
			handlers.Inferer
		}{b, inf}
	}
	switch {
	case isTP && isW:
		return struct {
			*binder
			handlers.TensorPreprocessor
			handlers.Warmer
		}{b, tp, w}
	case isTP:
		return struct {
			*binder
			handlers.TensorPreprocessor
		}{b, tp}
	case isW:
		return struct {
			*binder
			handlers.Warmer
		}{b, w}
	}
	return b
}

// binder binds the workers' model to the probe.
type binder struct {
	handlers.Handler
	p *Probe
}

func (b *binder) BindModel(m torch.Model, runners int) (torch.Model, error) {
	bound, err := handlers.Bind(b.Handler, m, runners)
	if err != nil {
		return nil, err
	}
	return &probed{Model: bound, p: b.p}, nil
}

// probed is the model the workers run: the bound model, with the probe's function first.
type probed struct {
	torch.Model
	p *Probe
}

func (m *probed) Forward(args ...any) (any, error) {
	if f := m.p.before.Load(); f != nil {
		(*f)(torch.NumThreads())
	}
	return m.Model.Forward(args...)
}
