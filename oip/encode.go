package oip

import (
	"encoding/json"
	"fmt"
	"strconv"
)

// EncodeResponse builds a response body. binary(name) says whether output name goes binary (the server decides from binary_data_output and per-output binary_data; FP16/BF16 always binary). Non-binary outputs get JSON "data" as a flat array of numbers (bools for BOOL, strings for BYTES); binary ones get parameters {"binary_data_size": n} and their bytes appended in output order. headerLen is the JSON length when any output is binary, else -1 (no header to send).
//
// The outputs written are outs, in order; resp.Outputs is ignored. JSON outputs carry no
// "parameters", because Triton's C++ client requires binary_data_size in any output that has
// them. An output that JSON cannot carry exactly (a NaN or infinity, BYTES that are not UTF-8)
// goes binary too. binary may be nil (all JSON). Errors are about outs (a datatype, shape or
// data length that do not agree) or resp.Parameters, never about the client.
func EncodeResponse(resp *InferResponse, outs []Tensor, binary func(name string) bool) (body []byte, headerLen int, err error) {
	b := make([]byte, 0, 256)
	b = append(b, `{"model_name":`...)
	b = appendJSONString(b, resp.ModelName)
	if resp.ModelVersion != "" {
		b = append(b, `,"model_version":`...)
		b = appendJSONString(b, resp.ModelVersion)
	}
	if resp.ID != "" {
		b = append(b, `,"id":`...)
		b = appendJSONString(b, resp.ID)
	}
	if len(resp.Parameters) > 0 {
		b = append(b, ',')
		if b, err = appendParameters(b, resp.Parameters); err != nil {
			return nil, 0, err
		}
	}
	b = append(b, `,"outputs":`...)
	b, bin, err := appendTensors(b, outs, func(t *Tensor) bool { return binary != nil && binary(t.Name) })
	if err != nil {
		return nil, 0, err
	}
	b = append(b, '}')
	return withBinary(b, bin)
}

// EncodeRequest builds an infer request body from req and the input tensors ins; req.Inputs
// is ignored, and req.Outputs are sent as they are. binary sends every input as binary data;
// FP16 and BF16 inputs, and any that JSON cannot carry exactly, go binary regardless.
// headerLen is the JSON length when any input is binary, else -1.
func EncodeRequest(req *InferRequest, ins []Tensor, binary bool) (body []byte, headerLen int, err error) {
	b := make([]byte, 0, 256)
	b = append(b, '{')
	if req.ID != "" {
		b = append(b, `"id":`...)
		b = appendJSONString(b, req.ID)
		b = append(b, ',')
	}
	if len(req.Parameters) > 0 {
		if b, err = appendParameters(b, req.Parameters); err != nil {
			return nil, 0, err
		}
		b = append(b, ',')
	}
	b = append(b, `"inputs":`...)
	b, bin, err := appendTensors(b, ins, func(*Tensor) bool { return binary })
	if err != nil {
		return nil, 0, err
	}
	if len(req.Outputs) > 0 {
		o, err := json.Marshal(req.Outputs)
		if err != nil {
			return nil, 0, fmt.Errorf("oip: requested outputs: %w", err)
		}
		b = append(b, `,"outputs":`...)
		b = append(b, o...)
	}
	b = append(b, '}')
	return withBinary(b, bin)
}

// appendTensors appends the JSON array of tensors ts and returns those that go binary, in order.
func appendTensors(b []byte, ts []Tensor, wantBinary func(*Tensor) bool) (_ []byte, bin [][]byte, err error) {
	b = append(b, '[')
	for i := range ts {
		t := &ts[i]
		if err := checkTensor(t); err != nil {
			return nil, nil, err
		}
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"name":`...)
		b = appendJSONString(b, t.Name)
		b = append(b, `,"datatype":"`...)
		b = append(b, t.Datatype...)
		b = append(b, `","shape":[`...)
		for j, d := range t.Shape {
			if j > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, d, 10)
		}
		b = append(b, ']')
		ok := false
		if !wantBinary(t) {
			mark := len(b)
			b = append(b, `,"data":`...)
			if b, ok = appendData(b, t); !ok {
				b = b[:mark]
			}
		}
		if !ok {
			b = append(b, `,"parameters":{"binary_data_size":`...)
			b = strconv.AppendInt(b, int64(len(t.Data)), 10)
			b = append(b, '}')
			bin = append(bin, t.Data)
		}
		b = append(b, '}')
	}
	return append(b, ']'), bin, nil
}

// withBinary appends the binary tensors to the JSON header in one allocation of the final size.
func withBinary(header []byte, bin [][]byte) ([]byte, int, error) {
	if len(bin) == 0 {
		return header, -1, nil
	}
	n := len(header)
	for _, d := range bin {
		n += len(d)
	}
	body := make([]byte, 0, n)
	body = append(body, header...)
	for _, d := range bin {
		body = append(body, d...)
	}
	return body, len(header), nil
}

// checkTensor checks that a tensor about to be encoded is self-consistent, so that a bug
// upstream fails here and not in the peer's decoder.
func checkTensor(t *Tensor) error {
	if t.Name == "" {
		return fmt.Errorf("oip: tensor with no name")
	}
	size := DatatypeSize(t.Datatype)
	if size < 0 {
		return fmt.Errorf("oip: tensor %q: unknown datatype %q", t.Name, t.Datatype)
	}
	n, err := ElementCount(t.Shape)
	if err != nil {
		return fmt.Errorf("oip: tensor %q: %w", t.Name, err)
	}
	if size == 0 {
		if err := checkBytesElements(t.Data, n); err != nil {
			return fmt.Errorf("oip: tensor %q: BYTES data: %w", t.Name, err)
		}
		return nil
	}
	if n > maxInt/int64(size) || int64(len(t.Data)) != n*int64(size) {
		return fmt.Errorf("oip: tensor %q: shape %v of %s needs %d bytes, data has %d", t.Name, t.Shape, t.Datatype, n*int64(size), len(t.Data))
	}
	return nil
}

// appendParameters appends the field "parameters":{...}.
func appendParameters(b []byte, p Parameters) ([]byte, error) {
	j, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("oip: parameters: %w", err)
	}
	b = append(b, `"parameters":`...)
	return append(b, j...), nil
}

func appendJSONString(b []byte, s string) []byte {
	// Names and ids are printable ASCII that needs no escape: appended as they are, they are
	// what json.Marshal writes, without its reflection and allocation (a request's 2–4 strings).
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			j, _ := json.Marshal(s) // a string always marshals
			return append(b, j...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
