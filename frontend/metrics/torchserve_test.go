package metrics

import (
	"strings"
	"testing"
)

// TorchServe's series are written as its Java client writes them; the rest stay as they are.
func TestTorchServeMetricsText(t *testing.T) {
	in := "# TYPE Requests2XX counter\nRequests2XX{Level=\"Host\",Hostname=\"h\"} 4\nQueueTime{Level=\"Host\",Hostname=\"h\"} 0.5\n" +
		"ts_inference_latency_microseconds{model_name=\"m\",model_version=\"1.0\",hostname=\"h\"} 12345678\ntorchd_workers{model=\"m\",version=\"1.0\"} 2\n"
	var b strings.Builder
	writeTorchServeText(&b, []byte(in))
	want := "# TYPE Requests2XX counter\nRequests2XX{Level=\"Host\",Hostname=\"h\",} 4.0\nQueueTime{Level=\"Host\",Hostname=\"h\",} 0.5\n" +
		"ts_inference_latency_microseconds{model_name=\"m\",model_version=\"1.0\",hostname=\"h\",} 1.2345678E7\ntorchd_workers{model=\"m\",version=\"1.0\"} 2\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}
