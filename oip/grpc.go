package oip

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"

	"github.com/torchd/torchd/internal/bytestr"
	pb "github.com/torchd/torchd/proto/inference"
)

// The protocol over gRPC (inference.GRPCInferenceService): ModelInferRequest and
// ModelInferResponse to and from the same InferRequest, InferResponse and Tensor values the
// REST codec uses, with the same checks. A tensor travels either as typed contents, one
// repeated field per datatype family, or as raw bytes laid out as REST's binary data
// (raw_input_contents / raw_output_contents, one entry per tensor, in order).

// DecodeInferRequest turns a gRPC infer request into the protocol's request and one Tensor
// per input, in input order. It checks what DecodeRequest checks of a REST body: names,
// datatypes, shapes, and data that matches them exactly, whether typed or raw. Errors wrap
// ErrBadRequest. Raw tensors' Data alias m's bytes.
func DecodeInferRequest(m *pb.ModelInferRequest) (*InferRequest, []Tensor, error) {
	raw := m.GetRawInputContents()
	if len(raw) > 0 && len(raw) != len(m.GetInputs()) {
		return nil, nil, errorf(ErrBadRequest, "raw_input_contents has %d entries for %d inputs; send every input raw, or none", len(raw), len(m.GetInputs()))
	}
	req := &InferRequest{ID: m.GetId(), Parameters: parameters(m.GetParameters())}
	ts := make([]Tensor, len(m.GetInputs()))
	seen := make(map[string]bool, len(ts))
	for i, in := range m.GetInputs() {
		size, n, err := tensorHeader("input", i, in.GetName(), in.GetDatatype(), in.GetShape(), seen, ErrBadRequest)
		if err != nil {
			return nil, nil, err
		}
		var data []byte
		if len(raw) > 0 {
			if hasContents(in.GetContents()) {
				return nil, nil, errorf(ErrBadRequest, "input %q has both contents and raw_input_contents", in.GetName())
			}
			data = raw[i]
			if err := checkData(in.GetDatatype(), size, n, data); err != nil {
				return nil, nil, errorf(ErrBadRequest, "input %q: raw_input_contents: %v", in.GetName(), err)
			}
		} else if data, err = contentsData(in.GetDatatype(), in.GetContents(), n); err != nil {
			return nil, nil, errorf(ErrBadRequest, "input %q: %v", in.GetName(), err)
		}
		ts[i] = Tensor{Name: in.GetName(), Datatype: in.GetDatatype(), Shape: in.GetShape(), Data: data}
		req.Inputs = append(req.Inputs, RequestInput{Name: in.GetName(), Shape: in.GetShape(), Datatype: in.GetDatatype(), Parameters: parameters(in.GetParameters())})
	}
	for _, o := range m.GetOutputs() {
		req.Outputs = append(req.Outputs, RequestOutput{Name: o.GetName(), Parameters: parameters(o.GetParameters())})
	}
	return req, ts, nil
}

// EncodeInferResponse turns the protocol's response and its output tensors into a gRPC infer
// response. With raw, or when an output has no typed field (FP16, BF16), every output goes
// in raw_output_contents, since a client reads either all outputs raw or none.
func EncodeInferResponse(resp *InferResponse, outs []Tensor, raw bool) (*pb.ModelInferResponse, error) {
	m := &pb.ModelInferResponse{ModelName: resp.ModelName, ModelVersion: resp.ModelVersion, Id: resp.ID}
	for i := range outs {
		if err := checkTensor(&outs[i]); err != nil {
			return nil, err
		}
		raw = raw || !jsonable(outs[i].Datatype)
	}
	for _, t := range outs {
		o := &pb.ModelInferResponse_InferOutputTensor{Name: t.Name, Datatype: t.Datatype, Shape: t.Shape}
		if raw {
			m.RawOutputContents = append(m.RawOutputContents, t.Data)
		} else {
			o.Contents = typedContents(t)
		}
		m.Outputs = append(m.Outputs, o)
	}
	return m, nil
}

// JSONTensor turns an output whose Data is a flat list of JSON values (numbers, or strings
// for BYTES) into a Tensor of its datatype and shape. A BYTES element that is not a JSON
// string is kept as its JSON text.
func JSONTensor(o ResponseOutput) (Tensor, error) {
	var data []byte
	if o.Datatype == "BYTES" {
		list, ok := o.Data.([]any)
		if !ok {
			return Tensor{}, fmt.Errorf("oip: output %q: BYTES data must be a list", o.Name)
		}
		for _, e := range list {
			var s []byte
			switch x := e.(type) {
			case string:
				s = []byte(x)
			case json.RawMessage:
				var str string
				if json.Unmarshal(x, &str) == nil {
					s = []byte(str)
				} else {
					s = x
				}
			default:
				j, err := json.Marshal(x)
				if err != nil {
					return Tensor{}, fmt.Errorf("oip: output %q: %v", o.Name, err)
				}
				s = j
			}
			data = binary.LittleEndian.AppendUint32(data, uint32(len(s)))
			data = append(data, s...)
		}
	} else {
		j, err := json.Marshal(o.Data)
		if err != nil {
			return Tensor{}, fmt.Errorf("oip: output %q: %v", o.Name, err)
		}
		n, err := ElementCount(o.Shape)
		if err != nil {
			return Tensor{}, fmt.Errorf("oip: output %q: %v", o.Name, err)
		}
		if data, err = parseData(j, o.Shape, n, o.Datatype, false); err != nil {
			return Tensor{}, fmt.Errorf("oip: output %q: %v", o.Name, err)
		}
	}
	return Tensor{Name: o.Name, Datatype: o.Datatype, Shape: o.Shape, Data: data}, nil
}

// parameters turns gRPC parameters into the protocol's, with numbers as float64, as REST's
// JSON decodes them, so that both are read the same way.
func parameters(p map[string]*pb.InferParameter) Parameters {
	if len(p) == 0 {
		return nil
	}
	out := make(Parameters, len(p))
	for k, v := range p {
		switch x := v.GetParameterChoice().(type) {
		case *pb.InferParameter_BoolParam:
			out[k] = x.BoolParam
		case *pb.InferParameter_Int64Param:
			out[k] = float64(x.Int64Param)
		case *pb.InferParameter_Uint64Param:
			out[k] = float64(x.Uint64Param)
		case *pb.InferParameter_DoubleParam:
			out[k] = x.DoubleParam
		case *pb.InferParameter_StringParam:
			out[k] = x.StringParam
		}
	}
	return out
}

func hasContents(c *pb.InferTensorContents) bool {
	return len(c.GetBoolContents())+len(c.GetIntContents())+len(c.GetInt64Contents())+len(c.GetUintContents())+
		len(c.GetUint64Contents())+len(c.GetFp32Contents())+len(c.GetFp64Contents())+len(c.GetBytesContents()) > 0
}

// checkData checks that data holds exactly n elements of datatype, as binary data must.
func checkData(datatype string, size int, n int64, data []byte) error {
	if size == 0 {
		return checkBytesElements(data, n)
	}
	if int64(len(data)) != n*int64(size) {
		return fmt.Errorf("%d elements of %s need %d bytes, got %d", n, datatype, n*int64(size), len(data))
	}
	if datatype == "BOOL" {
		return checkBools(data)
	}
	return nil
}

// contentsData lays out typed contents as binary data. The narrower integer types travel
// widened and must fit their type.
func contentsData(datatype string, c *pb.InferTensorContents, n int64) ([]byte, error) {
	field, got := contentsField(datatype, c)
	if field == "" {
		return nil, fmt.Errorf("%s has no typed contents; send it in raw_input_contents", datatype)
	}
	// The count is checked before anything is allocated for the shape, which the client chose.
	if int64(got) != n {
		return nil, fmt.Errorf("its shape needs %d elements in contents.%s, got %d", n, field, got)
	}
	size := DatatypeSize(datatype)
	out := make([]byte, 0, max(size, 0)*got)
	switch datatype {
	case "BOOL":
		for _, b := range c.GetBoolContents() {
			out = append(out, boolByte(b))
		}
	case "INT8", "INT16", "INT32":
		bits := size * 8
		for i, v := range c.GetIntContents() {
			if lo, hi := -int64(1)<<(bits-1), int64(1)<<(bits-1)-1; int64(v) < lo || int64(v) > hi {
				return nil, fmt.Errorf("element %d (%d) does not fit %s", i, v, datatype)
			}
			out = appendUint(out, size, uint64(v))
		}
	case "INT64":
		for _, v := range c.GetInt64Contents() {
			out = binary.LittleEndian.AppendUint64(out, uint64(v))
		}
	case "UINT8", "UINT16", "UINT32":
		for i, v := range c.GetUintContents() {
			if size < 4 && v >= 1<<(size*8) {
				return nil, fmt.Errorf("element %d (%d) does not fit %s", i, v, datatype)
			}
			out = appendUint(out, size, uint64(v))
		}
	case "UINT64":
		for _, v := range c.GetUint64Contents() {
			out = binary.LittleEndian.AppendUint64(out, v)
		}
	case "FP32":
		for _, v := range c.GetFp32Contents() {
			out = binary.LittleEndian.AppendUint32(out, math.Float32bits(v))
		}
	case "FP64":
		for _, v := range c.GetFp64Contents() {
			out = binary.LittleEndian.AppendUint64(out, math.Float64bits(v))
		}
	case "BYTES":
		for _, b := range c.GetBytesContents() {
			if int64(len(b)) > math.MaxUint32 {
				return nil, fmt.Errorf("a BYTES element is limited to 4 GiB")
			}
			out = binary.LittleEndian.AppendUint32(out, uint32(len(b)))
			out = append(out, b...)
		}
	}
	return out, nil
}

// contentsField names the typed field that carries datatype, with the elements it holds;
// "" for FP16 and BF16, which have none.
func contentsField(datatype string, c *pb.InferTensorContents) (string, int) {
	switch datatype {
	case "BOOL":
		return "bool_contents", len(c.GetBoolContents())
	case "INT8", "INT16", "INT32":
		return "int_contents", len(c.GetIntContents())
	case "INT64":
		return "int64_contents", len(c.GetInt64Contents())
	case "UINT8", "UINT16", "UINT32":
		return "uint_contents", len(c.GetUintContents())
	case "UINT64":
		return "uint64_contents", len(c.GetUint64Contents())
	case "FP32":
		return "fp32_contents", len(c.GetFp32Contents())
	case "FP64":
		return "fp64_contents", len(c.GetFp64Contents())
	case "BYTES":
		return "bytes_contents", len(c.GetBytesContents())
	}
	return "", 0
}

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}

func appendUint(b []byte, size int, v uint64) []byte {
	o := len(b)
	b = append(b, make([]byte, size)...)
	putUint(b[o:], size, v)
	return b
}

// typedContents is t's data as typed contents; t is checked and has a typed field.
func typedContents(t Tensor) *pb.InferTensorContents {
	c := &pb.InferTensorContents{}
	d := t.Data
	size := DatatypeSize(t.Datatype)
	if t.Datatype == "BYTES" {
		c.BytesContents, _ = bytestr.Split(d) // checked by the caller
		return c
	}
	for i := 0; i+size <= len(d); i += size {
		e := d[i:]
		switch t.Datatype {
		case "BOOL":
			c.BoolContents = append(c.BoolContents, e[0] != 0)
		case "UINT8":
			c.UintContents = append(c.UintContents, uint32(e[0]))
		case "UINT16":
			c.UintContents = append(c.UintContents, uint32(binary.LittleEndian.Uint16(e)))
		case "UINT32":
			c.UintContents = append(c.UintContents, binary.LittleEndian.Uint32(e))
		case "UINT64":
			c.Uint64Contents = append(c.Uint64Contents, binary.LittleEndian.Uint64(e))
		case "INT8":
			c.IntContents = append(c.IntContents, int32(int8(e[0])))
		case "INT16":
			c.IntContents = append(c.IntContents, int32(int16(binary.LittleEndian.Uint16(e))))
		case "INT32":
			c.IntContents = append(c.IntContents, int32(binary.LittleEndian.Uint32(e)))
		case "INT64":
			c.Int64Contents = append(c.Int64Contents, int64(binary.LittleEndian.Uint64(e)))
		case "FP32":
			c.Fp32Contents = append(c.Fp32Contents, math.Float32frombits(binary.LittleEndian.Uint32(e)))
		case "FP64":
			c.Fp64Contents = append(c.Fp64Contents, math.Float64frombits(binary.LittleEndian.Uint64(e)))
		}
	}
	return c
}
