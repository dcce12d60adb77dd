package core

import "time"

// Trace is a traced request's record of its path (package internal/tracing implements it
// with OpenTelemetry). The core reports the stages it times, and opens the span of the batch
// the request rides in; it never learns how they are exported. A request that is not traced
// has a nil Trace and pays a nil check at each stage.
type Trace interface {
	// Model names the version that serves the request, once the registry found it.
	Model(name, version string)
	// Stage records a stage of the request that ran from start to end: "admission" (when
	// the request waited for its place, or was refused), "preprocess", "queue" or
	// "postprocess". err, when not nil, is how the stage failed.
	Stage(name string, start, end time.Time, err error)
	// Fail records the error the core answers the request with.
	Fail(err error)
	// Batch opens the span of a batch that this request rides in, with every traced request
	// of the batch as members (this one among them); it may return nil (nothing to record).
	// It is called on the worker's goroutine.
	Batch(b BatchInfo, members []Trace) BatchTrace
}

// BatchInfo describes a dispatched batch for its span.
type BatchInfo struct {
	Model, Version string
	Device         string // cpu, cuda:N
	// Backend runs the batch: "libtorch" in-process, or "handler_process" (an archive's
	// Python handler in TorchServe's worker, package handlerproc).
	Backend    string
	Size       int // the requests in the batch, traced or not
	Dispatched time.Time
}

// BatchTrace is an open batch span; the worker that runs the batch records its forwards and
// ends it once they are done.
type BatchTrace interface {
	// Forward records one forward of the batch's rows; when a batch fails, each of its
	// requests is retried alone, one forward each.
	Forward(start, end time.Time, err error)
	// End ends the batch span; err is the batch's failure (a batch of several then had its
	// requests retried one by one).
	End(end time.Time, err error)
}

// traceBatch opens the span of batch when any of its requests is traced; with none it
// returns nil and allocates nothing.
func (p *WorkerPool) traceBatch(batch []*job, dispatched time.Time) BatchTrace {
	var lead Trace
	n := 0
	for _, j := range batch {
		if j.trace != nil {
			if lead == nil {
				lead = j.trace
			}
			n++
		}
	}
	if lead == nil {
		return nil
	}
	members := make([]Trace, 0, n)
	for _, j := range batch {
		if j.trace != nil {
			members = append(members, j.trace)
		}
	}
	return lead.Batch(BatchInfo{Model: p.model, Version: p.version, Device: p.backend.Device(), Backend: p.backend.Kind(), Size: len(batch), Dispatched: dispatched}, members)
}
