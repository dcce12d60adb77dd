package core

import (
	"errors"
	"fmt"
	"time"

	"github.com/torchd/torchd/handlers"
)

// Request is one inference request as a protocol front-end hands it to Serve: the model
// version it names, what its transport knows (Call), and how to read its input.
type Request struct {
	Model, Version string // Version "": the default version
	Call
	// Explain asks for the handler's explanation of the input (Integrated Gradients of
	// Input.Target) in place of a prediction; a model that cannot explain is ErrUnsupported.
	Explain bool
	// Raw answers with the model's output tensors (Result.Out) and skips the handler's
	// Postprocess.
	Raw bool
	// Check, when set, vets the version before the request takes a place in its queue: that
	// its handler answers what the protocol needs. Its error is the request's answer.
	Check func(v *ModelVersion) error
	// Decode reads the request's input once it holds its place in the version's queue, in
	// the caller's goroutine. Its errors are the client's (ErrBadInput) unless they carry a
	// kind of their own (Errorf).
	Decode func(v *ModelVersion) (Input, error)
	// Encode, when set, turns the result into the protocol's answer within the call, so that
	// an answer that cannot be encoded counts as the request's failure. Its errors are
	// ErrInference unless they carry a kind of their own.
	Encode func(res *Result) error
}

// Input is a request's decoded input: exactly one of Payloads (through the handler's
// Preprocess), Tensor (through its PreprocessTensor) or Sample (straight to the model,
// already its tensors; the handler's Postprocess is skipped).
type Input struct {
	Payloads *handlers.Request
	Tensor   *handlers.Tensor // its Name names it in errors
	Sample   *handlers.Sample
	// Timeout bounds the request from its arrival (0: none), with response_timeout and the
	// Call's own limit: the earliest wins.
	Timeout time.Duration
	// Target is the class an explanation explains.
	Target int
}

// Serve serves one inference request whole, whatever its protocol: registry → admission →
// decode and preprocess (in the caller's goroutine) → the version's batcher → a worker (a
// batched forward, or an explanation) → postprocess → Encode → the metrics, statistics and
// self-tuning. Its error is one of the kinds of errors.go, which each protocol answers in
// its own terms. Result.Version is set once the model was found.
func (r *Registry) Serve(req *Request) (Result, error) {
	arrived := time.Now()
	v, err := r.Get(req.Model, req.Version)
	if err != nil {
		if req.Trace != nil {
			req.Trace.Fail(err)
		}
		return Result{}, err
	}
	if req.Trace != nil {
		req.Trace.Model(v.Name, v.Version)
	}
	if req.Check != nil {
		err = req.Check(v)
	}
	if err == nil && req.Explain {
		err = v.explainable()
	}
	if err != nil {
		// Refused before any work: the version serves nothing for it, and counts nothing.
		if req.Trace != nil {
			req.Trace.Fail(err)
		}
		return Result{Version: v}, err
	}
	r.serving.Add(1)
	defer r.served()
	v.enter()
	res, err := v.serve(req, arrived)
	v.answered(req.Call, err, time.Since(arrived), res, req.Version != "")
	return res, err
}

// served counts a request out of the registry's requests in flight.
func (r *Registry) served() {
	r.lastServed.Store(time.Now().UnixNano())
	r.serving.Add(-1)
}

// Serving returns the inference requests in flight, every version's, and when the latest
// ended (zero: none yet): what the daemon's idle memory trim waits on.
func (r *Registry) Serving() (int, time.Time) {
	n, last := r.serving.Load(), r.lastServed.Load()
	if last == 0 {
		return int(n), time.Time{}
	}
	return int(n), time.Unix(0, last)
}

// serve is the request's path once it is counted in: it holds a place, is decoded and
// preprocessed, runs on a worker, then is postprocessed and encoded.
func (v *ModelVersion) serve(req *Request, arrived time.Time) (Result, error) {
	a, err := v.admit(req.Call)
	if err != nil {
		return Result{Version: v}, err
	}
	defer a.release()
	in, sample, err := v.decode(req, a)
	if err != nil {
		if t := req.Trace; t != nil {
			t.Stage("preprocess", a.admitted, time.Now(), err)
			t.Fail(err)
		}
		return Result{Version: v}, err
	}
	if t := req.Trace; t != nil {
		t.Stage("preprocess", a.admitted, time.Now(), nil)
	}
	var ex *explanation
	if req.Explain {
		ex = &explanation{target: in.Target}
	}
	var res Result
	if cm, ok := v.model.(composite); ok && ex == nil {
		res, err = a.compose(cm, sample, arrived, in.Timeout)
	} else {
		res, err = a.run(sample, arrived, in.Timeout, ex)
	}
	res.Version, res.Sample = v, sample
	if err != nil {
		if req.Trace != nil {
			req.Trace.Fail(err)
		}
		return res, err
	}
	handled := false
	if !req.Explain && !req.Raw && in.Sample == nil {
		handled = true
		if res.Response, err = v.postprocess(sample, res, arrived, req.Trace); err != nil {
			return res, err
		}
	}
	if req.Encode == nil {
		return res, nil
	}
	t1 := time.Now()
	if err = req.Encode(&res); err != nil {
		err = withKind(err, ErrInference)
	}
	if t := req.Trace; t != nil {
		// The front-end's encoding is the request's postprocess when the handler's did not run.
		if !handled {
			t.Stage("postprocess", t1, time.Now(), err)
		}
		if err != nil {
			t.Fail(err)
		}
	}
	return res, err
}

// decode reads the request's input and preprocesses it into the sample the model runs.
func (v *ModelVersion) decode(req *Request, a *admission) (Input, *handlers.Sample, error) {
	in, err := req.Decode(v)
	if err != nil {
		return in, nil, withKind(err, ErrBadInput)
	}
	switch {
	case in.Sample != nil:
		return in, in.Sample, nil
	case in.Tensor != nil:
		tp, ok := v.handler.(handlers.TensorPreprocessor)
		if !ok {
			return in, nil, errorf(ErrUnsupported, "model %s: its handler (%s) does not take tensors", v.Name, v.HandlerName)
		}
		t0 := time.Now()
		s, err := tp.PreprocessTensor(*in.Tensor)
		v.metrics.Preprocess(t0)
		if err != nil {
			return in, nil, handlerError(err, ErrBadInput, fmt.Sprintf("input %q: %v", in.Tensor.Name, err))
		}
		return in, s, nil
	case in.Payloads != nil:
		if _, composite := v.model.(composite); !composite && !req.Explain && in.Payloads.Row == nil {
			// A forward's input may go where its batch will run it (rows.go).
			in.Payloads.Row = a.rsv.row
		}
		s, err := v.preprocess(in.Payloads)
		return in, s, err
	}
	return in, nil, errorf(ErrBadInput, "the request has no input")
}

// preprocess runs v's handler on a decoded request; its errors are the client's.
func (v *ModelVersion) preprocess(req *handlers.Request) (*handlers.Sample, error) {
	t0 := time.Now()
	sample, err := v.handler.Preprocess(req)
	v.metrics.Preprocess(t0)
	if errors.Is(err, handlers.ErrCanceled) {
		return nil, errorf(ErrClientGone, "%s", err.Error())
	}
	if err != nil {
		return nil, handlerError(err, ErrBadInput, err.Error())
	}
	return sample, nil
}

// postprocess turns a request's share of the batch output into its response with v's
// handler; arrived is when the request came, for the handler-time metric.
func (v *ModelVersion) postprocess(sample *handlers.Sample, res Result, arrived time.Time, t Trace) (*handlers.Response, error) {
	t1 := time.Now()
	resp, err := v.handler.Postprocess(sample, res.Out)
	v.metrics.Postprocess(t1)
	v.metrics.Handler(time.Since(arrived) - res.Queued)
	if err != nil {
		e := handlerError(err, ErrInference, err.Error())
		if t != nil {
			t.Stage("postprocess", t1, time.Now(), e)
			t.Fail(e)
		}
		return nil, e
	}
	if t != nil {
		t.Stage("postprocess", t1, time.Now(), nil)
	}
	return resp, nil
}

// answered records a request at its end, whichever protocol served it: the metrics, the
// statistics and the tuner; and counts it out (see enter). A request whose client has gone
// counts as ErrClientGone, whatever it was answered: no one read the answer.
func (v *ModelVersion) answered(c Call, err error, took time.Duration, res Result, named bool) {
	if !errors.Is(err, ErrClientGone) && c.Gone != nil && c.Gone() {
		err = ErrClientGone
	}
	v.record(err, took, res, named)
}
