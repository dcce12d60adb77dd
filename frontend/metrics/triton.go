package metrics

import (
	"fmt"
	"io"

	"github.com/torchd/torchd/core"
)

// Triton's metric names, with its labels model and version, for the dashboards and alerts
// written against Triton. They are read from the statistics (Registry.Statistics) at scrape
// time, so the request path pays nothing more for them, and an unloaded version's series
// end with it.
var tritonCounters = []struct {
	name, help string
	value      func(s *core.Statistics) uint64
}{
	{"nv_inference_request_success", "Number of successful inference requests, all batch sizes", func(s *core.Statistics) uint64 { return s.Requests.Answered.Count }},
	{"nv_inference_count", "Number of inferences performed (a request of batch n counts n)", func(s *core.Statistics) uint64 { return s.Items }},
	{"nv_inference_exec_count", "Number of model executions (batched forwards)", func(s *core.Statistics) uint64 { return s.Forwards }},
	{"nv_inference_request_duration_us", "Cumulative time of successful requests in the server, in microseconds", func(s *core.Statistics) uint64 { return s.Requests.Answered.Ns / 1000 }},
	{"nv_inference_queue_duration_us", "Cumulative time successful requests waited in the queue, in microseconds", func(s *core.Statistics) uint64 { return s.Requests.Queue.Ns / 1000 }},
	{"nv_inference_compute_input_duration_us", "Cumulative time turning requests into input tensors, in microseconds", func(s *core.Statistics) uint64 { return s.Requests.Input.Ns / 1000 }},
	{"nv_inference_compute_infer_duration_us", "Cumulative time in the model's forward, in microseconds", func(s *core.Statistics) uint64 { return s.Requests.Forward.Ns / 1000 }},
	{"nv_inference_compute_output_duration_us", "Cumulative time turning outputs into responses, in microseconds", func(s *core.Statistics) uint64 { return s.Requests.Output.Ns / 1000 }},
}

// writeTriton writes Triton's families for the versions in stats.
func writeTriton(w io.Writer, stats []core.Statistics) {
	if len(stats) == 0 {
		return
	}
	labels := func(s *core.Statistics) string { return fmt.Sprintf(`model=%q,version=%q`, s.Name, s.Version) }
	for _, c := range tritonCounters {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s counter\n", c.name, c.help, c.name)
		for i := range stats {
			fmt.Fprintf(w, "%s{%s} %d\n", c.name, labels(&stats[i]), c.value(&stats[i]))
		}
	}
	fmt.Fprintf(w, "# HELP nv_inference_request_failure Number of failed inference requests, by reason\n# TYPE nv_inference_request_failure counter\n")
	for i := range stats {
		for _, r := range core.FailReasons {
			fmt.Fprintf(w, "nv_inference_request_failure{%s,reason=%q} %d\n", labels(&stats[i]), r, stats[i].Failures[r])
		}
	}
	fmt.Fprintf(w, "# HELP nv_inference_pending_request_count Requests accepted and not yet running, queued or being decoded\n# TYPE nv_inference_pending_request_count gauge\n")
	for i := range stats {
		fmt.Fprintf(w, "nv_inference_pending_request_count{%s} %d\n", labels(&stats[i]), stats[i].Pending)
	}
}
