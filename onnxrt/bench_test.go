package onnxrt_test

import (
	"testing"

	"github.com/torchd/torchd/onnxrt"
)

// BenchmarkRun runs mnist (one image) and bert (a batch of three texts) on one session with
// ONNX Runtime's default threads.
func BenchmarkRun(b *testing.B) {
	for _, tc := range []struct{ model, file string }{{"mnist", "model.onnx"}, {"bert", "model.bin"}} {
		b.Run(tc.model, func(b *testing.B) {
			s := open(b, zoo(b, tc.model, tc.file), onnxrt.Options{})
			c := refs(b, tc.model)[0]
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.Run(c.Inputs, c.In, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
