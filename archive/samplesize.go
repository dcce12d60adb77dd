package archive

import (
	"fmt"
	"math/bits"
)

// MaxSampleBytes bounds one sample of a declared tensor: the bytes of its shape with each
// variable dimension counted as 1, and the batch dimension as 1 item. A worker builds a
// warm-up sample of zeros from the declared shape; a product of dimensions each within
// range could still ask for exabytes (a panic) or tens of gigabytes (memory exhausted), so a
// shape is checked as a whole, with overflow checked, when its config is read.
const MaxSampleBytes = 1 << 30

// dtypeSizes are the bytes of one element of each dtype; a "string" element counts 1.
var dtypeSizes = map[string]int64{"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8, "int64": 8, "int32": 4,
	"int16": 2, "int8": 1, "uint8": 1, "bool": 1, "string": 1}

// SampleBytes returns the bytes of one sample of shape, elemSize bytes an element, with
// variable (negative) dimensions counted as 1; an error when it is over MaxSampleBytes.
func SampleBytes(shape []int64, elemSize int64) (int64, error) {
	n := uint64(max(elemSize, 1))
	for _, d := range shape {
		if d < 0 {
			continue
		}
		hi, lo := bits.Mul64(n, uint64(d))
		if hi != 0 || lo > MaxSampleBytes {
			return 0, fmt.Errorf("shape %v holds more than the %d MiB a sample may (variable dimensions counted as 1)", shape, MaxSampleBytes>>20)
		}
		n = lo
	}
	if n > MaxSampleBytes {
		return 0, fmt.Errorf("shape %v holds more than the %d MiB a sample may (variable dimensions counted as 1)", shape, MaxSampleBytes>>20)
	}
	return int64(n), nil
}

// SampleBytes returns the bytes of one sample of the tensor (see the function SampleBytes);
// an unknown dtype counts 1 byte an element.
func (s TensorSpec) SampleBytes() (int64, error) {
	return SampleBytes(s.Shape, dtypeSizes[s.DType])
}
