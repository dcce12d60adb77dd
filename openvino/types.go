package openvino

import "fmt"

// ElemType is a tensor element type, numbered as OpenVINO's ov_element_type_e.
type ElemType int

// The element types torchd feeds and reads; OpenVINO numbers them so.
const (
	Dynamic  ElemType = 0
	Bool     ElemType = 1
	BFloat16 ElemType = 2
	Float16  ElemType = 3
	Float32  ElemType = 4
	Float64  ElemType = 5
	Int8     ElemType = 7
	Int16    ElemType = 8
	Int32    ElemType = 9
	Int64    ElemType = 10
	Uint8    ElemType = 16
	Uint16   ElemType = 17
	Uint32   ElemType = 18
	Uint64   ElemType = 19
)

var elemNames = map[ElemType]string{
	Dynamic: "dynamic", Bool: "boolean", BFloat16: "bf16", Float16: "f16", Float32: "f32", Float64: "f64",
	6: "i4", Int8: "i8", Int16: "i16", Int32: "i32", Int64: "i64", 11: "u1", 12: "u2", 13: "u3", 14: "u4",
	15: "u6", Uint8: "u8", Uint16: "u16", Uint32: "u32", Uint64: "u64", 20: "nf4", 21: "f8e4m3",
	22: "f8e5m2", 23: "string", 24: "f4e2m1", 25: "f8e8m0",
}

var elemSizes = map[ElemType]int{
	Bool: 1, BFloat16: 2, Float16: 2, Float32: 4, Float64: 8, Int8: 1, Int16: 2, Int32: 4, Int64: 8,
	Uint8: 1, Uint16: 2, Uint32: 4, Uint64: 8,
}

// String is OpenVINO's name of the type: f32, bf16, i64, u8, ...
func (t ElemType) String() string {
	if s, ok := elemNames[t]; ok {
		return s
	}
	return fmt.Sprintf("element type %d", int(t))
}

// Size is the bytes of one element; 0 for the types this binding does not feed or read
// (strings, sub-byte and 8-bit float types, dynamic).
func (t ElemType) Size() int { return elemSizes[t] }
