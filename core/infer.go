package core

import (
	"errors"
	"time"

	"github.com/torchd/torchd/handlers"
	"github.com/torchd/torchd/torch"
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

// Infer is the request path past the registry, for every protocol: admit → decode (which
// preprocesses) → batcher → worker. decode runs once the request holds its place in v's
// queue; each protocol encodes the result its own way.
func (v *ModelVersion) Infer(c Call, arrived time.Time, decode func() (*handlers.Sample, error)) (*handlers.Sample, Result, error) {
	a, err := v.Admit(c)
	if err != nil {
		return nil, Result{}, err
	}
	defer a.Release()
	sample, err := decode()
	if err != nil {
		if c.Trace != nil {
			c.Trace.Stage("preprocess", a.admitted, time.Now(), err)
			c.Trace.Fail(err)
		}
		return nil, Result{}, err
	}
	res, err := a.Run(sample, arrived, 0)
	return sample, res, err
}

// Admission is a request's place in a version's queue, and in its window of requests that
// hold decoded input, taken before its body is decoded. Run queues the request; Release
// gives the place back on every other path. Both are idempotent.
type Admission struct {
	v   *ModelVersion
	c   Call
	rsv *reservation
	// admitted is when the request took its window place, for its preprocess span (traced
	// requests only).
	admitted time.Time
}

// Admit reserves the request's place in v's queue before its body is decoded; a full queue
// is ErrQueueFull at once. Then it waits, in arrival order, for a place in v's window (see
// inputWindow), at most response_timeout or the client's own limit, whichever is shorter
// (ErrDeadline).
func (v *ModelVersion) Admit(c Call) (*Admission, error) {
	if c.Trace == nil {
		return v.admit(c)
	}
	start := time.Now()
	a, err := v.admit(c)
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

func (v *ModelVersion) admit(c Call) (*Admission, error) {
	rsv, ok := v.batcher.reserve()
	if !ok {
		return nil, v.queueFull()
	}
	limit, own := v.responseTimeout(), time.Duration(0)
	if c.Timeout != nil {
		// A malformed limit is answered by Run, once the request is decoded.
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
	return &Admission{v: v, c: c, rsv: rsv}, nil
}

// Release gives the request's place back, unless Run queued it.
func (a *Admission) Release() { a.rsv.release() }

func (v *ModelVersion) queueFull() error {
	return errorf(ErrQueueFull, "Model \"%s\" job queue is full (job_queue_size %d); retry later.", v.Name, v.batcher.Capacity())
}

// Preprocess runs v's handler on a decoded request; its errors are the client's.
func (v *ModelVersion) Preprocess(req *handlers.Request) (*handlers.Sample, error) {
	t0 := time.Now()
	sample, err := v.handler.Preprocess(req)
	v.metrics.Preprocess(t0)
	if errors.Is(err, handlers.ErrCanceled) {
		return nil, errorf(ErrClientGone, "%s", err.Error())
	}
	if err != nil {
		return nil, &Error{Kind: ErrBadInput, Status: handlers.StatusOf(err, 0), Msg: err.Error()}
	}
	return sample, nil
}

// Postprocess turns a request's share of the batch output into its response with v's
// handler; started is when the request's handling began, for the handler-time metric.
func (v *ModelVersion) Postprocess(sample *handlers.Sample, res Result, started time.Time) (*handlers.Response, error) {
	t1 := time.Now()
	resp, err := v.handler.Postprocess(sample, res.Out)
	v.metrics.Postprocess(t1)
	v.metrics.Handler(time.Since(started) - res.Queued)
	if err != nil {
		e := &Error{Kind: ErrInference, Status: handlers.StatusOf(err, 0), Msg: err.Error()}
		if res.trace != nil {
			res.trace.Stage("postprocess", t1, time.Now(), e)
			res.trace.Fail(e)
		}
		return nil, e
	}
	if res.trace != nil {
		res.trace.Stage("postprocess", t1, time.Now(), nil)
	}
	return resp, nil
}

// Run queues the admitted request's preprocessed sample on v's batcher and waits for its
// share of the batch output. The deadline is the earliest of response_timeout, timeout
// (0: none) and the client's own limit, counted from arrival.
func (a *Admission) Run(sample *handlers.Sample, arrived time.Time, timeout time.Duration) (Result, error) {
	t := a.c.Trace
	if t == nil {
		return a.run(sample, arrived, timeout)
	}
	t.Stage("preprocess", a.admitted, time.Now(), nil)
	res, err := a.run(sample, arrived, timeout)
	res.trace = t
	if err != nil {
		t.Fail(err)
	}
	return res, err
}

func (a *Admission) run(sample *handlers.Sample, arrived time.Time, timeout time.Duration) (Result, error) {
	v, c, rsv := a.v, a.c, a.rsv
	defer rsv.release()
	if c.Timeout != nil {
		ct, err := c.Timeout()
		if err != nil {
			return Result{}, errorf(ErrBadInput, "%v", err)
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
			return Result{}, errorf(ErrBadInput, "%v", err)
		}
	}
	// A package runs at most the rows it was exported for in one forward; the batcher splits
	// batches to fit, but one request of more rows is the client's to split.
	if p, ok := v.module.(*torch.Package); ok {
		if _, hi := p.BatchRange(); int64(sample.Items) > hi {
			return Result{}, errorf(ErrBadInput, "model %s takes at most %d rows a request (the batch range its package was exported for), got %d", v.Name, hi, sample.Items)
		}
	}
	j := &job{sample: sample, rsv: rsv, enqueued: time.Now(), done: make(chan Result, 1), gone: c.Gone, trace: c.Trace}
	if timeout > 0 {
		j.deadline = arrived.Add(timeout)
	}
	if v.pool.Count() == 0 {
		return Result{}, errorf(ErrNoWorker, "Model \"%s\" has no worker to serve inference request. Please use scale workers API to add workers.", v.Name)
	}
	err := v.batcher.Submit(j)
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
	if res.err == nil && v.adapter != nil {
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
	return res, &Error{Kind: ErrInference, Status: handlers.StatusOf(res.err, 0), Msg: res.err.Error()}
}
