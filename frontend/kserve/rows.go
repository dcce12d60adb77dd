package kserve

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/handlers"
	"github.com/torchd/torchd/oip"
)

// KServe v2 for handlers that take rows (a Python handler), as TorchServe's kservev2 envelope
// hands a request to its handler and answers it: each input is a row of the handler's batch
// (its name, shape, datatype, and data reshaped to its shape, or a BYTES input's first
// element), and the handler's answer for row i is the output named after input i, its
// answer flattened with NumPy's datatype.

// inputRows are the request's inputs as the handler's rows, and their names in order.
func inputRows(tensors []oip.Tensor) ([][]handlers.Payload, []string, error) {
	if len(tensors) == 0 {
		return nil, nil, errors.New("the request has no inputs")
	}
	rows := make([][]handlers.Payload, len(tensors))
	names := make([]string, len(tensors))
	for i, t := range tensors {
		flat, ok := oip.DataJSON(t)
		if !ok {
			return nil, nil, fmt.Errorf("input %q: its %s data cannot reach a Python handler as JSON (FP16, BF16, NaN, infinity and non-UTF-8 BYTES cannot)", t.Name, t.Datatype)
		}
		var list []any
		dec := json.NewDecoder(bytes.NewReader(flat))
		dec.UseNumber()
		if err := dec.Decode(&list); err != nil {
			return nil, nil, fmt.Errorf("input %q: %v", t.Name, err)
		}
		var data any
		if t.Datatype == "BYTES" {
			if len(list) == 0 {
				return nil, nil, fmt.Errorf("input %q: a BYTES input needs an element", t.Name)
			}
			data = list[0]
		} else {
			dims := make([]int, len(t.Shape))
			for j, d := range t.Shape {
				dims[j] = int(d)
			}
			data = list
			if len(dims) > 1 {
				data = nest(list, dims)
			}
		}
		fields := []struct {
			name string
			v    any
		}{{"name", t.Name}, {"shape", t.Shape}, {"datatype", t.Datatype}, {"data", data}}
		for _, f := range fields {
			b, err := json.Marshal(f.v)
			if err != nil {
				return nil, nil, fmt.Errorf("input %q: %v", t.Name, err)
			}
			rows[i] = append(rows[i], handlers.Payload{Name: f.name, ContentType: "application/json", Data: b})
		}
		names[i] = t.Name
	}
	return rows, names, nil
}

// rowsAnswer is the v2 response to the rows' answers (the handler's JSON list).
func rowsAnswer(v *core.ModelVersion, req *oip.InferRequest, inputs []string, body []byte) (v2Answer, error) {
	var answers []json.RawMessage
	if err := json.Unmarshal(body, &answers); err != nil {
		return v2Answer{}, errors.New("the handler's answers are not a JSON list")
	}
	if len(answers) > len(inputs) {
		return v2Answer{}, fmt.Errorf("the handler gave %d answers for %d inputs", len(answers), len(inputs))
	}
	resp := &oip.InferResponse{ModelName: v.Name, ModelVersion: v.Version, ID: req.ID}
	if strings.TrimSpace(resp.ID) == "" {
		resp.ID = newRequestID()
	}
	for i, a := range answers {
		out, err := ndOutput(inputs[i], a)
		if err != nil {
			return v2Answer{}, err
		}
		resp.Outputs = append(resp.Outputs, out)
	}
	return v2Answer{resp: resp, envelope: true}, nil
}

// ndOutput is an answer as NumPy's np.array(answer).flatten() makes it: nested lists
// flattened, a scalar a list of one; all booleans BOOL, all integers INT64, all numbers
// FP64, and anything else BYTES (strings as they are, other values as their JSON).
func ndOutput(name string, answer json.RawMessage) (oip.ResponseOutput, error) {
	var v any
	dec := json.NewDecoder(bytes.NewReader(answer))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return oip.ResponseOutput{}, fmt.Errorf("output %q: the handler's answer is not JSON", name)
	}
	var flat []any
	if l, ok := v.([]any); ok {
		flat = flatten(l, []any{})
	} else {
		flat = []any{v}
	}
	out := oip.ResponseOutput{Name: name, Shape: []int64{int64(len(flat))}, Data: flat}
	bools, ints, nums := true, true, true
	for _, e := range flat {
		switch x := e.(type) {
		case bool:
			ints, nums = false, false
		case json.Number:
			bools = false
			if strings.ContainsAny(string(x), ".eE") {
				ints = false
			}
		default:
			bools, ints, nums = false, false, false
		}
	}
	switch {
	case len(flat) == 0:
		out.Datatype = "FP64" // np.array([]) is float64
	case bools:
		out.Datatype = "BOOL"
	case ints:
		out.Datatype = "INT64"
	case nums:
		out.Datatype = "FP64"
	default:
		out.Datatype = "BYTES"
		for i, e := range flat {
			if _, ok := e.(string); !ok {
				b, _ := json.Marshal(e)
				flat[i] = json.RawMessage(b)
			}
		}
	}
	return out, nil
}
