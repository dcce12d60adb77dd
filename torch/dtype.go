package torch

import "fmt"

// DType is a tensor element type.
type DType int32

// The values match the TD_* codes of capi/torchd.h.
const (
	Float32  DType = 1
	Float16  DType = 2
	BFloat16 DType = 3
	Float64  DType = 4
	Int64    DType = 5
	Int32    DType = 6
	Uint8    DType = 7
	Int8     DType = 8
	Bool     DType = 9
	// Bytes is not a LibTorch type: a tensor of byte strings (Triton's BYTES, TYPE_STRING;
	// ONNX's string), each element a 4-byte little-endian length and its bytes, as Triton's
	// binary protocol lays them out. Runtimes that take strings (ONNX Runtime, handler
	// processes) read them; LibTorch refuses them.
	Bytes DType = 100
	// Int16 is a tensor type of ONNX models; torchd's LibTorch binding has no code for it.
	Int16 DType = 101
)

var dtypeNames = map[DType]string{
	Float32: "float32", Float16: "float16", BFloat16: "bfloat16", Float64: "float64",
	Int64: "int64", Int32: "int32", Uint8: "uint8", Int8: "int8", Bool: "bool", Bytes: "string", Int16: "int16",
}

var dtypeSizes = map[DType]int{
	Float32: 4, Float16: 2, BFloat16: 2, Float64: 8, Int64: 8, Int32: 4, Uint8: 1, Int8: 1, Bool: 1, Int16: 2,
}

func (d DType) String() string {
	if n, ok := dtypeNames[d]; ok {
		return n
	}
	return fmt.Sprintf("DType(%d)", int32(d))
}

// Size returns the size of one element in bytes, or 0 for an unknown DType.
func (d DType) Size() int { return dtypeSizes[d] }

// ParseDType returns the DType named by s ("float32", "int64", ...).
func ParseDType(s string) (DType, error) {
	for d, n := range dtypeNames {
		if n == s {
			return d, nil
		}
	}
	return 0, fmt.Errorf("torch: unknown dtype %q (want one of float32, float16, bfloat16, float64, int64, int32, uint8, int8, bool)", s)
}

// Half is an IEEE 754 half-precision float, stored as its bits.
type Half uint16

// BHalf is a bfloat16, stored as its bits (the high half of a float32).
type BHalf uint16

// Element is a Go type that a tensor can hold without conversion.
type Element interface {
	float32 | float64 | int64 | int32 | uint8 | int8 | bool | Half | BHalf
}

// DTypeOf returns the DType of element type T.
func DTypeOf[T Element]() DType {
	var z T
	switch any(z).(type) {
	case float32:
		return Float32
	case float64:
		return Float64
	case int64:
		return Int64
	case int32:
		return Int32
	case uint8:
		return Uint8
	case int8:
		return Int8
	case bool:
		return Bool
	case Half:
		return Float16
	case BHalf:
		return BFloat16
	}
	panic("unreachable")
}
