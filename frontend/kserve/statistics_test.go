package kserve

import (
	"encoding/json"
	"testing"

	"github.com/torchd/torchd/core"
)

// The core's statistics reach Triton's JSON with Triton's names: the request phases, each
// batch size's forwards (compute_input and compute_output counted with no time), an empty
// batch list as [], and no cache.
func TestTritonStatistics(t *testing.T) {
	s := core.Statistics{Name: "m", Version: "1", LastAnswered: 7, Items: 6, Forwards: 2,
		Requests: core.RequestStats{Answered: core.StatDuration{Count: 3, Ns: 30}, Failed: core.StatDuration{Count: 1, Ns: 5},
			Input: core.StatDuration{Count: 3, Ns: 1}, Queue: core.StatDuration{Count: 3, Ns: 2},
			Forward: core.StatDuration{Count: 3, Ns: 3}, Output: core.StatDuration{Count: 3, Ns: 4}},
		Batches: []core.BatchStats{{Size: 4, Forward: core.StatDuration{Count: 2, Ns: 9}}}}
	b, err := json.Marshal(tritonStatistics([]core.Statistics{s, {Name: "n", Version: "2", Batches: []core.BatchStats{}}}))
	if err != nil {
		t.Fatal(err)
	}
	var got []struct {
		Name           string                    `json:"name"`
		LastInference  uint64                    `json:"last_inference"`
		InferenceCount uint64                    `json:"inference_count"`
		ExecutionCount uint64                    `json:"execution_count"`
		InferenceStats map[string]map[string]int `json:"inference_stats"`
		BatchStats     []map[string]any          `json:"batch_stats"`
	}
	if err := json.Unmarshal(b, &got); err != nil || len(got) != 2 {
		t.Fatalf("%s: %v", b, err)
	}
	g := got[0]
	st := g.InferenceStats
	if g.LastInference != 7 || g.InferenceCount != 6 || g.ExecutionCount != 2 || st["success"]["count"] != 3 || st["fail"]["ns"] != 5 ||
		st["compute_input"]["ns"] != 1 || st["queue"]["ns"] != 2 || st["compute_infer"]["ns"] != 3 || st["compute_output"]["ns"] != 4 ||
		st["cache_hit"]["count"] != 0 || len(st) != 8 {
		t.Errorf("inference stats: %s", b)
	}
	if len(g.BatchStats) != 1 || g.BatchStats[0]["batch_size"] != 4.0 ||
		g.BatchStats[0]["compute_infer"].(map[string]any)["ns"] != 9.0 || g.BatchStats[0]["compute_input"].(map[string]any)["ns"] != 0.0 ||
		g.BatchStats[0]["compute_output"].(map[string]any)["count"] != 2.0 {
		t.Errorf("batch stats: %s", b)
	}
	if got[1].BatchStats == nil {
		t.Errorf("no batches should be [], got %s", b)
	}
}
