package handlerproc

import (
	_ "embed"
	"slices"
	"strconv"
)

// A handler process runs each batch on the share of the cores the core gives it
// (core.ThreadCarrier): alone, a batch runs on every core; with two processes busy, each on
// half, where each taking every core put twice as many OpenMP threads as cores to run and
// wait for each other. The count goes to the worker with the batch, on torchd's side of
// TorchServe's protocol: worker.py, which runs TorchServe's worker unchanged, takes it off
// the batch's first request before the handler sees the batch, and sets torch's threads when
// it changes, unless OMP_NUM_THREADS or the handler itself chose them.

//go:embed worker.py
var workerScript string

// threadsHeader carries the count on the batch's first request.
const threadsHeader = "torchd-threads"

// withThreads is batch with the thread count on its first request, copied so that the
// caller's requests are not changed; threads 0 sends none. A client's header of that name
// never gets this far (the python handler's Preprocess drops it).
func withThreads(batch []Request, threads int) []Request {
	if threads <= 0 || len(batch) == 0 {
		return batch
	}
	out := append([]Request(nil), batch...)
	first := out[0]
	first.Headers = append(slices.Clip(first.Headers), Header{Name: threadsHeader, Value: strconv.Itoa(threads)})
	out[0] = first
	return out
}
