package onnxrt

import "fmt"

// ElemType is a tensor element type, numbered as ONNX's TensorProto.DataType (and ONNX
// Runtime's ONNXTensorElementDataType).
type ElemType int

// The element types; ONNX numbers them so.
const (
	Undefined  ElemType = 0
	Float32    ElemType = 1
	Uint8      ElemType = 2
	Int8       ElemType = 3
	Uint16     ElemType = 4
	Int16      ElemType = 5
	Int32      ElemType = 6
	Int64      ElemType = 7
	String     ElemType = 8
	Bool       ElemType = 9
	Float16    ElemType = 10
	Float64    ElemType = 11
	Uint32     ElemType = 12
	Uint64     ElemType = 13
	Complex64  ElemType = 14
	Complex128 ElemType = 15
	BFloat16   ElemType = 16
)

var elemNames = map[ElemType]string{
	Undefined: "undefined", Float32: "float", Uint8: "uint8", Int8: "int8", Uint16: "uint16",
	Int16: "int16", Int32: "int32", Int64: "int64", String: "string", Bool: "bool",
	Float16: "float16", Float64: "double", Uint32: "uint32", Uint64: "uint64",
	Complex64: "complex64", Complex128: "complex128", BFloat16: "bfloat16",
	17: "float8e4m3fn", 18: "float8e4m3fnuz", 19: "float8e5m2", 20: "float8e5m2fnuz",
	21: "uint4", 22: "int4", 23: "float4e2m1",
}

var elemSizes = map[ElemType]int{
	Float32: 4, Uint8: 1, Int8: 1, Uint16: 2, Int16: 2, Int32: 4, Int64: 8, Bool: 1,
	Float16: 2, Float64: 8, Uint32: 4, Uint64: 8, Complex64: 8, Complex128: 16, BFloat16: 2,
	17: 1, 18: 1, 19: 1, 20: 1,
}

// String is ONNX's name of the type, as in "tensor(float)": float, float16, int64, string, ...
func (t ElemType) String() string {
	if s, ok := elemNames[t]; ok {
		return s
	}
	return fmt.Sprintf("element type %d", int(t))
}

// TensorType is ONNX Runtime's name of a tensor of t, e.g. "tensor(float)".
func (t ElemType) TensorType() string { return "tensor(" + t.String() + ")" }

// Size is the bytes of one element: 0 for String (Value.Strings holds those), the 4-bit
// types and Undefined, which have no whole-byte size.
func (t ElemType) Size() int { return elemSizes[t] }
