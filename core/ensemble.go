package core

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/handlers"
)

// RuntimeEnsemble names core's own runtime of ensembles: models that run a request through
// other models (a Triton ensemble's steps).
const RuntimeEnsemble = "ensemble"

// composite models run a request through other models, in the request's goroutine, in place
// of a batch of their own. Each step is a Serve of its model: its queue, batching, deadline
// and statistics are the step model's own.
type composite interface {
	compose(s *handlers.Sample, c Call, deadline time.Time) ([]handlers.Tensor, error)
}

// ensemble is a loaded ensemble: its steps, in an order in which each step's inputs are
// given by the ensemble's inputs or an earlier step.
type ensemble struct {
	r        *Registry
	name     string
	ins      []archive.TensorSpec // the ensemble's inputs, in the order its samples carry them
	outs     []archive.TensorSpec // and outputs, in the order it answers them
	steps    []archive.EnsembleStep
	stepIns  [][]archive.TensorSpec // each step model's inputs, in the order it takes them
	stepOuts [][]archive.TensorSpec
}

var (
	_ Model     = (*ensemble)(nil)
	_ Signed    = (*ensemble)(nil)
	_ composite = (*ensemble)(nil)
)

// compose runs an admitted request through a composite model in the caller's goroutine, with
// the deadline run would give it.
func (a *admission) compose(cm composite, sample *handlers.Sample, arrived time.Time, timeout time.Duration) (Result, error) {
	v, c := a.v, a.c
	defer a.rsv.release()
	timeout, err := a.prepare(sample, timeout)
	if err != nil {
		return Result{}, err
	}
	var deadline time.Time
	if timeout > 0 {
		deadline = arrived.Add(timeout)
	}
	start := time.Now()
	out, err := cm.compose(sample, c, deadline)
	res := Result{Out: out, Input: start.Sub(arrived), Inference: time.Since(start), BatchSize: 1}
	if err == nil && v.adapter != nil {
		err = v.adapter.FromModel(out, sample.Items)
	}
	return res, err
}

// loadEnsemble waits for the ensemble's models to be loaded (they may be loading beside it,
// as a repository loads every model at once), up to startup_timeout, and checks that each
// step's tensors are ones its model has, of the types the ensemble's other steps give.
func (r *Registry) loadEnsemble(am *archive.Model, s ModelSettings) (Model, error) {
	e := &ensemble{r: r, name: am.Name, ins: am.Config.Inputs, outs: am.Config.Outputs, steps: am.Config.Ensemble}
	deadline := time.Now().Add(s.StartupTimeout)
	types := map[string]string{}
	for _, in := range e.ins {
		types[in.Name] = in.DType
	}
	for i, st := range e.steps {
		v, err := r.waitLoaded(st.Model, st.Version, deadline)
		if err != nil {
			return nil, errorf(ErrBadModel, "ensemble %s step %d: %v", am.Name, i+1, err)
		}
		ins, outs := v.Signature()
		for name, tensor := range st.Inputs {
			j := slices.IndexFunc(ins, func(t archive.TensorSpec) bool { return t.Name == name })
			if j < 0 {
				return nil, errorf(ErrBadModel, "ensemble %s step %d: model %s has no input %q (it has %s)", am.Name, i+1, st.Model, name, specNames(ins))
			}
			if dt, ok := types[tensor]; ok && dt != ins[j].DType {
				return nil, errorf(ErrBadModel, "ensemble %s step %d: tensor %q is %s, model %s's input %q takes %s", am.Name, i+1, tensor, dt, st.Model, name, ins[j].DType)
			}
		}
		if len(st.Inputs) != len(ins) {
			return nil, errorf(ErrBadModel, "ensemble %s step %d: model %s takes %d inputs (%s), the step maps %d", am.Name, i+1, st.Model, len(ins), specNames(ins), len(st.Inputs))
		}
		for name, tensor := range st.Outputs {
			j := slices.IndexFunc(outs, func(t archive.TensorSpec) bool { return t.Name == name })
			if j < 0 {
				return nil, errorf(ErrBadModel, "ensemble %s step %d: model %s has no output %q (it has %s)", am.Name, i+1, st.Model, name, specNames(outs))
			}
			types[tensor] = outs[j].DType
		}
		e.stepIns, e.stepOuts = append(e.stepIns, ins), append(e.stepOuts, outs)
	}
	for _, out := range e.outs {
		if dt := types[out.Name]; dt != out.DType {
			return nil, errorf(ErrBadModel, "ensemble %s: output %q is %s, its step gives %s", am.Name, out.Name, out.DType, dt)
		}
	}
	return e, nil
}

// waitLoaded returns a model version once it is loaded, waiting while it loads.
func (r *Registry) waitLoaded(name, version string, deadline time.Time) (*ModelVersion, error) {
	for {
		v, err := r.Get(name, version)
		if err == nil {
			return v, nil
		}
		if !errors.Is(err, ErrLoading) && !errors.Is(err, ErrModelNotFound) || time.Now().After(deadline) {
			return nil, fmt.Errorf("model %s is not loaded: %v", name, err)
		}
		if errors.Is(err, ErrModelNotFound) && !r.pending(name) {
			return nil, fmt.Errorf("model %s is not loaded (load it, or put it in the repository)", name)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// pending reports whether a model is being loaded somewhere that will register it: a
// repository or a start-up load that has not reached the registry yet. The loaders say so
// through Options.Pending.
func (r *Registry) pending(name string) bool {
	return r.opts.Pending != nil && r.opts.Pending(name)
}

func specNames(ts []archive.TensorSpec) string {
	var n []string
	for _, t := range ts {
		n = append(n, t.Name)
	}
	return strings.Join(n, ", ")
}

func (*ensemble) Kind() string   { return RuntimeEnsemble }
func (*ensemble) Device() string { return "cpu" }
func (*ensemble) Close() error   { return nil }

// Run is never called: an ensemble's requests run through compose.
func (e *ensemble) Run([]*handlers.Sample, *handlers.Stage) ([][]handlers.Tensor, error) {
	return nil, fmt.Errorf("ensemble %s runs through its steps, not in batches", e.name)
}

// Signature is the ensemble's declared inputs and outputs.
func (e *ensemble) Signature() (ins, outs []archive.TensorSpec) { return e.ins, e.outs }

// compose runs the steps in turn, each as a request of its model with the tensors its input
// map names, handed over in memory. The request's deadline is every step's; a step's failure
// fails the request with the step named.
func (e *ensemble) compose(s *handlers.Sample, c Call, deadline time.Time) ([]handlers.Tensor, error) {
	tensors := make(map[string]handlers.Tensor, len(e.ins))
	for i, in := range e.ins {
		if i < len(s.Tensors) {
			tensors[in.Name] = s.Tensors[i]
		}
	}
	items := s.Items
	for i, st := range e.steps {
		step := &handlers.Sample{Items: items}
		for _, in := range e.stepIns[i] {
			step.Tensors = append(step.Tensors, tensors[st.Inputs[in.Name]])
		}
		// A step is a span of the request's trace, not a request of its own there.
		sc := Call{Gone: c.Gone, Keep: c.Keep}
		if !deadline.IsZero() {
			left := time.Until(deadline)
			if left <= 0 {
				return nil, errorf(ErrDeadline, "ensemble %s did not answer within its timeout: step %d (%s) was not reached", e.name, i+1, st.Model)
			}
			sc.Timeout = func() (time.Duration, error) { return left, nil }
		}
		t0 := time.Now()
		res, err := e.r.Serve(&Request{Model: st.Model, Version: st.Version, Call: sc, Raw: true,
			Decode: func(*ModelVersion) (Input, error) { return Input{Sample: step}, nil }})
		if c.Trace != nil {
			c.Trace.Stage("step "+st.Model, t0, time.Now(), err)
		}
		if err != nil {
			return nil, withKind(fmt.Errorf("ensemble %s step %d (%s): %w", e.name, i+1, st.Model, err), ErrInference)
		}
		for j, out := range res.Out {
			name := out.Name
			if j < len(e.stepOuts[i]) {
				name = e.stepOuts[i][j].Name
			}
			if to, ok := st.Outputs[name]; ok {
				tensors[to] = out
			}
		}
	}
	outs := make([]handlers.Tensor, len(e.outs))
	for i, o := range e.outs {
		t, ok := tensors[o.Name]
		if !ok {
			return nil, errorf(ErrInference, "ensemble %s: no step gave its output %q", e.name, o.Name)
		}
		t.Name = o.Name
		outs[i] = t
	}
	return outs, nil
}
