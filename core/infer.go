package core

import (
	"errors"
	"time"

	"github.com/torchd/torchd/handlers"
)

// Call is what the request path needs from a request's transport, whatever its protocol.
type Call struct {
	// Gone reports a client that disconnected or cancelled; nil: never.
	Gone func() bool
	// Timeout is the client's own limit on the request, counted from its arrival (0: none).
	// It is read once the request holds its place in the queue and is decoded; its error is
	// the client's (a malformed header).
	Timeout func() (time.Duration, error)
	// Keep, when set, makes the request's input outlive the protocol's handler: the request's
	// tensors point into a body the HTTP server reuses once its handler returns, which a 504
	// does while the request may still be in a running batch. nil: the input is the request's.
	Keep func()
	// Trace records the request's stages and its batch (package internal/tracing); nil:
	// untraced, at the cost of a nil check per stage.
	Trace Trace
}

// admission is a request's place in a version's queue, and in its window of requests that
// hold decoded input, taken before its body is decoded. run queues the request; release
// gives the place back on every other path. Both are idempotent.
type admission struct {
	v   *ModelVersion
	c   Call
	rsv *reservation // res, allocated with the admission
	// admitted is when the request took its window place, for its preprocess span (traced
	// requests only).
	admitted time.Time
	res      reservation
}

// admit reserves the request's place in v's queue before its body is decoded; a full queue
// is ErrQueueFull at once. Then it waits, in arrival order, for a place in v's window (see
// inputWindow), at most response_timeout or the client's own limit, whichever is shorter
// (ErrDeadline).
func (v *ModelVersion) admit(c Call) (*admission, error) {
	if c.Trace == nil {
		return v.reserve(c)
	}
	start := time.Now()
	a, err := v.reserve(c)
	now := time.Now()
	// A request that took its place at once has no admission span: it would cost a span a
	// request and show nothing.
	if err != nil || a.rsv.blocked {
		c.Trace.Stage("admission", start, now, err)
	}
	if err != nil {
		c.Trace.Fail(err)
		return nil, err
	}
	a.admitted = now
	return a, nil
}

func (v *ModelVersion) reserve(c Call) (*admission, error) {
	a := &admission{v: v, c: c}
	if !v.batcher.reserveIn(&a.res) {
		return nil, v.queueFull()
	}
	rsv := &a.res
	a.rsv = rsv
	limit, own := v.responseTimeout(), time.Duration(0)
	if c.Timeout != nil {
		// A malformed limit is answered by run, once the request is decoded.
		if ct, err := c.Timeout(); err == nil && ct > 0 && (limit <= 0 || ct < limit) {
			limit, own = ct, ct
		}
	}
	if !rsv.wait(limit) {
		rsv.release()
		if own > 0 {
			return nil, errorf(ErrDeadline, "model %s: %v: no place for its input within the request's own limit (%v)", v.Name, ErrDeadline, own)
		}
		return nil, errorf(ErrDeadline, "model %s: %v (response_timeout %v)", v.Name, ErrDeadline, v.responseTimeout())
	}
	return a, nil
}

// release gives the request's place back, unless run queued it.
func (a *admission) release() { a.rsv.release() }

func (v *ModelVersion) queueFull() error {
	return errorf(ErrQueueFull, "model %s: its job queue is full (job_queue_size %d); retry later", v.Name, v.batcher.Capacity())
}

// prepare settles an admitted request's timeout, the earliest of response_timeout, timeout
// (0: none) and the client's own limit, and turns its sample into the model's tensors (the
// adapter's reshapes).
func (a *admission) prepare(sample *handlers.Sample, timeout time.Duration) (time.Duration, error) {
	v, c := a.v, a.c
	if c.Timeout != nil {
		ct, err := c.Timeout()
		if err != nil {
			return 0, errorf(ErrBadInput, "%v", err)
		}
		if ct > 0 && (timeout <= 0 || ct < timeout) {
			timeout = ct
		}
	}
	if rt := v.responseTimeout(); rt > 0 && (timeout <= 0 || rt < timeout) {
		timeout = rt
	}
	if v.adapter != nil {
		if err := v.adapter.ToModel(sample); err != nil {
			return 0, errorf(ErrBadInput, "%v", err)
		}
	}
	return timeout, nil
}

// run queues the admitted request's preprocessed sample on v's batcher and waits for its
// share of the batch output, or its explanation (ex). The deadline is the earliest of
// response_timeout, timeout (0: none) and the client's own limit, counted from arrival.
func (a *admission) run(sample *handlers.Sample, arrived time.Time, timeout time.Duration, ex *explanation) (Result, error) {
	v, c, rsv := a.v, a.c, a.rsv
	defer rsv.release()
	timeout, err := a.prepare(sample, timeout)
	if err != nil {
		return Result{}, err
	}
	// A package runs at most the rows it was exported for in one forward; the batcher splits
	// batches to fit, but one request of more rows is the client's to split.
	if rl, ok := v.model.(RowLimited); ok {
		if hi := rl.MaxRows(); hi > 0 && int64(sample.Items) > hi {
			return Result{}, errorf(ErrBadInput, "model %s takes at most %d rows a request (the batch range its package was exported for), got %d", v.Name, hi, sample.Items)
		}
	}
	j := &job{sample: sample, explain: ex, rsv: rsv, enqueued: time.Now(), done: make(chan Result, 1), gone: c.Gone, trace: c.Trace}
	if timeout > 0 {
		j.deadline = arrived.Add(timeout)
	}
	if v.pool.Count() == 0 {
		return Result{}, errorf(ErrNoWorker, "model %s has no worker to serve the request: none is running (scale its workers up)", v.Name)
	}
	err = v.batcher.Submit(j)
	rsv.release()
	if err != nil {
		return Result{}, v.queueFull()
	}
	var res Result
	if timeout > 0 {
		timer := time.NewTimer(time.Until(j.deadline))
		select {
		case res = <-j.done:
			timer.Stop()
		case <-timer.C:
			j.leaveWindow()
			v.batcher.abandon(j)
			if c.Keep != nil {
				c.Keep() // the batch may still read the body: the server must not reuse it
			}
			err := errorf(ErrDeadline, "model %s did not answer within its timeout (%v; response_timeout %v)", v.Name, timeout, v.responseTimeout())
			if c.Trace != nil {
				c.Trace.Stage("queue", j.enqueued, time.Now(), err)
			}
			return Result{Queued: j.queuedFor(time.Now())}, err
		}
	} else {
		res = <-j.done
	}
	if c.Trace != nil {
		// A request dropped from the queue (its deadline, its client gone) never reached a
		// batch: its queue stage is its failure.
		end, qerr := res.dispatched, error(nil)
		if end.IsZero() {
			end, qerr = time.Now(), res.err
		}
		c.Trace.Stage("queue", j.enqueued, end, qerr)
	}
	res.Input = j.enqueued.Sub(arrived)
	if res.err == nil && v.adapter != nil && ex == nil {
		res.err = v.adapter.FromModel(res.Out, sample.Items)
	}
	if res.err == nil {
		return res, nil
	}
	var ce *Error
	switch {
	case errors.Is(res.err, ErrDeadline), errors.Is(res.err, ErrClientGone):
		return res, errorf(res.err, "%v", res.err)
	case errors.Is(res.err, ErrQueueFull):
		return res, v.queueFull()
	case errors.As(res.err, &ce):
		return res, ce
	}
	return res, handlerError(res.err, ErrInference, res.err.Error())
}

// explanation asks a worker for the explanation of a request's input in place of its
// forward: Integrated Gradients of class target. The worker answers it alone, since its
// backward passes batch with nothing.
type explanation struct{ target int }

// explainable reports, as ErrUnsupported, why v cannot explain: its handler does not, or
// its model has no autograd.
func (v *ModelVersion) explainable() error {
	_, inHandler := v.model.(HandlerExplainer)
	if _, ok := v.handler.(handlers.Explainer); !ok && !inHandler {
		return errorf(ErrUnsupported, "model %s: its handler (%s) does not explain", v.Name, v.HandlerName)
	}
	ex, ok := v.model.(Explainer)
	if !ok {
		return errorf(ErrUnsupported, "model %s runs on %s, which cannot be explained (integrated gradients need TorchScript's autograd)", v.Name, v.model.Kind())
	}
	if err := ex.CanExplain(); err != nil {
		return errorf(ErrUnsupported, "model %s cannot be explained: %v", v.Name, err)
	}
	return nil
}
