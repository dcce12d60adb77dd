package openvino_test

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"testing"

	"github.com/torchd/torchd/openvino"
)

// BenchmarkInfer runs the zoo's int8 and fp32 IR at batch 1 and 32 through one request, as
// backends/openvino compiles it for one worker: LATENCY, one stream, OV_BENCH_THREADS threads
// (default 2), f32 precision hint. bench/openvino_forward.py interleaves it with OpenVINO's
// Python runner of the same IR.
func BenchmarkInfer(b *testing.B) {
	threads := 2
	if v, err := strconv.Atoi(os.Getenv("OV_BENCH_THREADS")); err == nil && v > 0 {
		threads = v
	}
	in, _ := readNpy(b, zoo(b, "ref_input.npy"))
	for _, name := range []string{"resnet18_ov_int8", "resnet18_ov"} {
		m := compile(b, name, openvino.Options{Precision: "f32", Hint: "LATENCY", Streams: 1, Threads: threads, DynamicBatch: true})
		r, err := m.NewRequest()
		if err != nil {
			b.Fatal(err)
		}
		for _, n := range []int{1, 32} {
			// n images: the 8 reference images, repeated.
			data := bytes.Repeat(in.Data, (n+7)/8)[:n*len(in.Data)/8]
			x := []openvino.Value{{Type: openvino.Float32, Shape: []int64{int64(n), 3, 224, 224}, Data: data}}
			b.Run(fmt.Sprintf("%s/batch=%d", name, n), func(b *testing.B) {
				for b.Loop() {
					if _, err := r.Infer(x); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
