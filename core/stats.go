package core

import (
	"cmp"
	"errors"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/torchd/torchd/handlers"
)

// A model version's statistics, kept on the one inference path and read by every protocol
// through Registry.Statistics. They are counts and cumulative times, in no protocol's shape:
// package kserve answers them as Triton's statistics extension (REST /stats, gRPC
// ModelStatistics), package metrics exposes Triton's nv_ families from them.

// StatDuration is a count of requests (or batches) and their cumulative time in ns.
type StatDuration struct {
	Count uint64
	Ns    uint64
}

// RequestStats are a model version's per-request statistics. Answered counts answered
// requests with their whole time in the server; Failed the rest. Input, Queue, Forward and
// Output count answered requests only:
//   - Input: arrival to queueing (decoding the body into tensors, the handler's
//     preprocess), which torchd does in the request's goroutine;
//   - Queue: queueing to the batch's dispatch;
//   - Forward: the batch's forward on a worker, concatenation and split included;
//   - Output: the rest (postprocess, encoding the answer).
type RequestStats struct {
	Answered, Failed              StatDuration
	Input, Queue, Forward, Output StatDuration
}

// BatchStats are the forwards of one batch size: the rows of a batch (two requests of 2
// rows each are a batch of 4), and the forwards' count and time.
type BatchStats struct {
	Size    uint64
	Forward StatDuration
}

// Statistics are one model version's statistics.
type Statistics struct {
	Name, Version string
	// LastAnswered is when the latest request was answered, in ms since the epoch; 0: never.
	LastAnswered uint64
	// Items counts inferred items (a request of batch 4 counts 4); Forwards counts batched
	// forwards. Their ratio is the mean batch size.
	Items, Forwards uint64
	Requests        RequestStats
	// Batches are by size, smallest first.
	Batches []BatchStats
	// Failures counts failed requests by reason (FailReasons); Pending is the requests
	// accepted but not yet running.
	Failures map[string]uint64
	Pending  int
}

// statDuration is the lock-free form of StatDuration.
type statDuration struct{ count, ns atomic.Uint64 }

func (s *statDuration) add(d time.Duration) {
	s.count.Add(1)
	s.ns.Add(uint64(max(d, 0)))
}

func (s *statDuration) load() StatDuration { return StatDuration{s.count.Load(), s.ns.Load()} }

// versionStats records a model version's statistics: a few atomic adds per request and one
// short lock per batch.
type versionStats struct {
	success, fail, queue, input, infer, output statDuration
	inferences, executions                     atomic.Uint64
	failures                                   [4]atomic.Uint64           // by FailReasons
	last                                       atomic.Int64               // UnixMilli
	latency                                    [latencyBins]atomic.Uint64 // per bucket; the last is +Inf

	mu      sync.Mutex
	batches map[int]*statDuration // batch size (rows) → forwards
}

func newVersionStats() *versionStats { return &versionStats{batches: map[int]*statDuration{}} }

// executed records a batched forward of the samples. A nil receiver records nothing.
func (s *versionStats) executed(samples []*handlers.Sample, infer time.Duration) {
	if s == nil {
		return
	}
	items := 0
	for _, smp := range samples {
		items += smp.Items
	}
	s.executions.Add(1)
	s.inferences.Add(uint64(items))
	s.mu.Lock()
	b := s.batches[items]
	if b == nil {
		b = &statDuration{}
		s.batches[items] = b
	}
	s.mu.Unlock()
	b.add(infer)
}

// answered records a request at its end: total is its whole time in the server; res is
// its share of the batch when it reached one (zero otherwise).
func (s *versionStats) answered(err error, total time.Duration, res Result) {
	if s == nil {
		return
	}
	s.last.Store(time.Now().UnixMilli())
	s.latency[sort.SearchFloat64s(LatencyBuckets, total.Seconds())].Add(1)
	if err != nil {
		s.fail.add(total)
		s.failures[slices.Index(FailReasons, FailReason(err))].Add(1)
		return
	}
	s.success.add(total)
	if res.BatchSize == 0 {
		return // answered without the model (none today; kept honest for future paths)
	}
	s.input.add(res.Input)
	s.queue.add(res.Queued)
	s.infer.add(res.Inference)
	s.output.add(total - res.Input - res.Queued - res.Inference)
}

func (s *versionStats) snapshot(name, version string) Statistics {
	out := Statistics{Name: name, Version: version, Items: s.inferences.Load(), Forwards: s.executions.Load(),
		Requests: RequestStats{
			Answered: s.success.load(), Failed: s.fail.load(), Queue: s.queue.load(),
			Input: s.input.load(), Forward: s.infer.load(), Output: s.output.load(),
		},
		Batches: []BatchStats{},
	}
	if t := s.last.Load(); t > 0 {
		out.LastAnswered = uint64(t)
	}
	out.Failures = map[string]uint64{}
	for i, r := range FailReasons {
		out.Failures[r] = s.failures[i].Load()
	}
	s.mu.Lock()
	for n, b := range s.batches {
		d := b.load()
		out.Batches = append(out.Batches, BatchStats{Size: uint64(n), Forward: d})
	}
	s.mu.Unlock()
	sort.Slice(out.Batches, func(i, j int) bool { return out.Batches[i].Size < out.Batches[j].Size })
	return out
}

// Statistics returns the statistics of every loaded version of a model, or of one version,
// or (name "") of every loaded model, sorted by name and version.
func (r *Registry) Statistics(name, version string) ([]Statistics, error) {
	var vs []*ModelVersion
	switch {
	case name == "":
		vs = r.Loaded()
	case version == "":
		all, _, err := r.Versions(name)
		if err != nil {
			return nil, errorf(ErrModelNotFound, "requested model '%s' is not available", name)
		}
		vs = all
	default:
		v, ok := r.Peek(name, version)
		if !ok {
			if _, _, err := r.Versions(name); err != nil {
				return nil, errorf(ErrModelNotFound, "requested model '%s' is not available", name)
			}
			return nil, errorf(ErrVersionNotFound, "requested model '%s' version %s is not available", name, version)
		}
		vs = []*ModelVersion{v}
	}
	out := make([]Statistics, 0, len(vs))
	for _, v := range vs {
		out = append(out, v.Statistics())
	}
	slices.SortFunc(out, func(a, b Statistics) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), CompareVersions(a.Version, b.Version))
	})
	return out, nil
}

// CompareVersions orders numeric versions (Triton's) by number, and others as strings.
func CompareVersions(a, b string) int {
	x, errA := strconv.ParseInt(a, 10, 64)
	y, errB := strconv.ParseInt(b, 10, 64)
	switch {
	case errA == nil && errB == nil:
		return cmp.Compare(x, y)
	}
	return cmp.Compare(a, b)
}

// Failure reasons of Triton's nv_inference_request_failure.
const (
	FailRejected = "REJECTED" // a full queue, a deadline, no worker, a model going away
	FailCanceled = "CANCELED" // the client left
	FailBackend  = "BACKEND"  // the model or its handler failed
	FailOther    = "OTHER"    // the request was wrong
)

// FailReasons lists the failure reasons in Statistics.Failures.
var FailReasons = []string{FailRejected, FailCanceled, FailBackend, FailOther}

// FailReason is the failure reason of a request that failed with err, by its kind.
func FailReason(err error) string {
	switch {
	case errors.Is(err, ErrQueueFull), errors.Is(err, ErrDeadline), errors.Is(err, ErrNoWorker),
		errors.Is(err, ErrUnregistered), errors.Is(err, ErrLoading):
		return FailRejected
	case errors.Is(err, ErrClientGone):
		return FailCanceled
	case errors.Is(err, ErrBadInput):
		return FailOther // the input was wrong, whoever said so
	case errors.Is(err, ErrInference), errors.Is(err, ErrLoadFailed), errors.Is(err, ErrStartupTimeout):
		return FailBackend
	}
	return FailOther
}

// LatencyBuckets are the upper bounds, in seconds, of a version's request-latency
// histogram (Stats.Latency), which the metrics' torchd_request_seconds shares.
var LatencyBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}

// latencyBins is LatencyBuckets' length and one for +Inf (an array's length is a constant).
const latencyBins = 18

func init() {
	if len(LatencyBuckets)+1 != latencyBins {
		panic("core: latencyBins does not match LatencyBuckets")
	}
}

// latencyCounts returns the histogram's cumulative counts, one per bucket of LatencyBuckets
// and a last one for +Inf, which is the total.
func (s *versionStats) latencyCounts() []uint64 {
	out := make([]uint64, len(s.latency))
	var sum uint64
	for i := range s.latency {
		sum += s.latency[i].Load()
		out[i] = sum
	}
	return out
}
