package kserve

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/torchd/torchd/oip"
)

// Triton's classification extension: an output requested with the parameter
// "classification": k (tritonclient's class_count) answers, for each batch row, its k largest
// values as BYTES strings "value:index", or "value:index:label" where the output has labels (a
// Triton model's label_filename, an archive's index_to_name.json), in place of the tensor. The
// value is written as Triton writes it (C++ std::to_string: six decimals for floats).

// classCount reads an output's classification parameter: 0 when absent.
func classCount(p oip.Parameters) (int, error) {
	v, ok := p["classification"]
	if !ok {
		return 0, nil
	}
	f, ok := v.(float64)
	if !ok || f < 1 || f != math.Trunc(f) || f > math.MaxInt32 {
		return 0, fmt.Errorf("parameter classification must be a positive integer (the number of classes), got %v", v)
	}
	return int(f), nil
}

// classify turns t into its top-k classes per row. batched: t leads with the batch
// dimension (each row is classified); else t is one row.
func classify(t oip.Tensor, k int, batched bool, labels map[int]string) (oip.Tensor, error) {
	values, err := numbers(t)
	if err != nil {
		return oip.Tensor{}, err
	}
	rows := 1
	if batched && len(t.Shape) > 0 {
		rows = int(t.Shape[0])
	}
	if rows == 0 || len(values)%rows != 0 {
		return oip.Tensor{}, fmt.Errorf("output %q of shape %v cannot be classified", t.Name, t.Shape)
	}
	per := len(values) / rows
	k = min(k, per)
	var data []byte
	idx := make([]int, per)
	for r := range rows {
		row := values[r*per : (r+1)*per]
		for i := range idx {
			idx[i] = i
		}
		slices.SortStableFunc(idx, func(a, b int) int {
			switch {
			case row[a].f > row[b].f:
				return -1
			case row[a].f < row[b].f:
				return 1
			}
			return 0
		})
		for _, i := range idx[:k] {
			s := row[i].text + ":" + strconv.Itoa(i)
			if l, ok := labels[i]; ok {
				s += ":" + l
			}
			data = binary.LittleEndian.AppendUint32(data, uint32(len(s)))
			data = append(data, s...)
		}
	}
	shape := []int64{int64(k)}
	if batched {
		shape = []int64{int64(rows), int64(k)}
	}
	return oip.Tensor{Name: t.Name, Datatype: "BYTES", Shape: shape, Data: data}, nil
}

type classValue struct {
	f    float64
	text string
}

// numbers reads t's elements with their text as Triton writes them.
func numbers(t oip.Tensor) ([]classValue, error) {
	var size int
	var read func(b []byte) classValue
	integer := func(v int64) classValue { return classValue{float64(v), strconv.FormatInt(v, 10)} }
	float := func(v float64) classValue { return classValue{v, strconv.FormatFloat(v, 'f', 6, 64)} }
	switch t.Datatype {
	case "FP32":
		size, read = 4, func(b []byte) classValue { return float(float64(math.Float32frombits(binary.LittleEndian.Uint32(b)))) }
	case "FP64":
		size, read = 8, func(b []byte) classValue { return float(math.Float64frombits(binary.LittleEndian.Uint64(b))) }
	case "INT64":
		size, read = 8, func(b []byte) classValue { return integer(int64(binary.LittleEndian.Uint64(b))) }
	case "INT32":
		size, read = 4, func(b []byte) classValue { return integer(int64(int32(binary.LittleEndian.Uint32(b)))) }
	case "INT16":
		size, read = 2, func(b []byte) classValue { return integer(int64(int16(binary.LittleEndian.Uint16(b)))) }
	case "INT8":
		size, read = 1, func(b []byte) classValue { return integer(int64(int8(b[0]))) }
	case "UINT8":
		size, read = 1, func(b []byte) classValue { return integer(int64(b[0])) }
	default:
		return nil, fmt.Errorf("class result not available for output %q due to unsupported type '%s'", t.Name, t.Datatype)
	}
	out := make([]classValue, 0, len(t.Data)/size)
	for off := 0; off+size <= len(t.Data); off += size {
		out = append(out, read(t.Data[off:]))
	}
	return out, nil
}
