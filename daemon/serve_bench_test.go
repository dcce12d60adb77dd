package daemon_test

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/torchd/torchd/daemon"
	"github.com/valyala/fasthttp"
)

// BenchmarkServeMetrics is the whole request path, in one process, with metrics on and off
// (enable_metrics_api): digits_tensor with an .npy body from keep-alive clients, batching
// off (batch_size 1), so each request makes every metric update once. The two
// sub-benchmarks should be compared over interleaved runs with benchstat; one intra-op
// thread and OMP_WAIT_POLICY=PASSIVE (which the torchd binary sets for itself) keep
// OpenMP's spinning out of a measurement of the request path:
//
//	go test -c -o /tmp/d.test ./daemon/ && cd daemon && for i in $(seq 8); do
//	  OMP_WAIT_POLICY=PASSIVE /tmp/d.test -test.run '^$' -test.bench ServeMetrics -test.benchtime 4000x | grep ^Bench
//	done > m.txt && benchstat m.txt
func BenchmarkServeMetrics(b *testing.B) {
	body, err := os.ReadFile(filepath.Join(zooDir, "digits", "sample_tensor.npy"))
	if err != nil {
		b.Fatal(err)
	}
	for _, on := range []bool{true, false} {
		b.Run(fmt.Sprintf("metrics=%v", on), func(b *testing.B) {
			cfg, err := daemon.LoadConfig([]string{"--model-store", store, "--models", "digits_tensor=digits_tensor.mar",
				"--inference-address", "127.0.0.1:0", "--management-address", "127.0.0.1:0", "--metrics-address", "127.0.0.1:0",
				"--grpc-address=", "--grpc-inference-address=", "--grpc-management-address=", "--access-log=false", fmt.Sprintf("--enable-metrics-api=%v", on), "--batch-size", "1", "--workers", "1", "--threads", "1"},
				func(string) string { return "" })
			if err != nil {
				b.Fatal(err)
			}
			d := daemon.New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
			if err := d.Start(); err != nil {
				b.Fatal(err)
			}
			defer d.Shutdown(b.Context())
			d.WaitStartup()
			inf, _, _ := d.Addrs()
			url := "http://" + inf + "/predictions/digits_tensor"
			c := &fasthttp.Client{}
			b.SetParallelism(2) // 2×GOMAXPROCS keep-alive clients
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
				defer fasthttp.ReleaseRequest(req)
				defer fasthttp.ReleaseResponse(resp)
				for pb.Next() {
					req.SetRequestURI(url)
					req.Header.SetMethod("POST")
					req.Header.SetContentType("application/x-npy")
					req.SetBody(body)
					if err := c.Do(req, resp); err != nil || resp.StatusCode() != 200 {
						b.Errorf("status %d, err %v: %s", resp.StatusCode(), err, resp.Body())
						return
					}
				}
			})
		})
	}
}
