package handlerproc

import (
	"strconv"
	"strings"
	"sync/atomic"
)

// busyProcesses counts the handler processes running a batch, every model's: they share the
// machine's cores. A forked worker runs each batch on its share of the threads torch gave it
// at its start (its own count divided by this count, at least one; forkserver.py's
// share_threads): alone, as at c=1, a batch gets every core; with both of two processes busy,
// each gets half, where each taking every core put twice as many threads as cores to run
// and wait for each other.
var busyProcesses atomic.Int64

// busyHeader carries the count to the worker on the batch's first request; the worker takes
// it off before the handler sees the batch.
const busyHeader = "torchd-busy-processes"

// withBusy is batch with the busy count on its first request, which it copies: the caller's
// requests are not changed. A client's header of that name is dropped, so that a client
// cannot choose a batch's threads.
func withBusy(batch []Request, busy int64) []Request {
	if len(batch) == 0 {
		return batch
	}
	out := append([]Request(nil), batch...)
	first := out[0]
	hs := make([]Header, 0, len(first.Headers)+1)
	for _, h := range first.Headers {
		if !strings.EqualFold(h.Name, busyHeader) {
			hs = append(hs, h)
		}
	}
	first.Headers = append(hs, Header{Name: busyHeader, Value: strconv.FormatInt(busy, 10)})
	out[0] = first
	return out
}
