package kserve

import "github.com/torchd/torchd/core"

// Triton's statistics extension: the core's statistics (core.Statistics) in Triton's
// ModelStatistics shape, which GET /v2/models/stats answers in JSON and gRPC's
// ModelStatistics in its messages.

// statDuration is Triton's StatisticDuration: a count and its cumulative time in ns.
type statDuration struct {
	Count uint64 `json:"count"`
	Ns    uint64 `json:"ns"`
}

// inferenceStats are Triton's InferStatistics. Queue and the three compute phases count
// successful requests only, as Triton does: compute_input is the core's Input (decoding and
// preprocess), compute_infer its Forward, compute_output its Output. torchd has no response
// cache: cache_hit and cache_miss stay zero.
type inferenceStats struct {
	Success       statDuration `json:"success"`
	Fail          statDuration `json:"fail"`
	Queue         statDuration `json:"queue"`
	ComputeInput  statDuration `json:"compute_input"`
	ComputeInfer  statDuration `json:"compute_infer"`
	ComputeOutput statDuration `json:"compute_output"`
	CacheHit      statDuration `json:"cache_hit"`
	CacheMiss     statDuration `json:"cache_miss"`
}

// batchStats are Triton's InferBatchStatistics. Triton's backends report the three compute
// phases per batch; torchd times a batch's forward as one step (compute_infer), and counts
// compute_input and compute_output with no time.
type batchStats struct {
	BatchSize     uint64       `json:"batch_size"`
	ComputeInput  statDuration `json:"compute_input"`
	ComputeInfer  statDuration `json:"compute_infer"`
	ComputeOutput statDuration `json:"compute_output"`
}

// modelStatistics is Triton's ModelStatistics.
type modelStatistics struct {
	Name           string         `json:"name"`
	Version        string         `json:"version"`
	LastInference  uint64         `json:"last_inference"`
	InferenceCount uint64         `json:"inference_count"`
	ExecutionCount uint64         `json:"execution_count"`
	InferenceStats inferenceStats `json:"inference_stats"`
	BatchStats     []batchStats   `json:"batch_stats"`
}

// tritonStatistics is stats in Triton's shape.
func tritonStatistics(stats []core.Statistics) []modelStatistics {
	dur := func(d core.StatDuration) statDuration { return statDuration{Count: d.Count, Ns: d.Ns} }
	out := make([]modelStatistics, len(stats))
	for i, s := range stats {
		r := s.Requests
		m := modelStatistics{Name: s.Name, Version: s.Version, LastInference: s.LastAnswered,
			InferenceCount: s.Items, ExecutionCount: s.Forwards,
			InferenceStats: inferenceStats{Success: dur(r.Answered), Fail: dur(r.Failed), Queue: dur(r.Queue),
				ComputeInput: dur(r.Input), ComputeInfer: dur(r.Forward), ComputeOutput: dur(r.Output)},
			BatchStats: make([]batchStats, len(s.Batches)),
		}
		for j, b := range s.Batches {
			counted := statDuration{Count: b.Forward.Count}
			m.BatchStats[j] = batchStats{BatchSize: b.Size, ComputeInput: counted, ComputeInfer: dur(b.Forward), ComputeOutput: counted}
		}
		out[i] = m
	}
	return out
}
