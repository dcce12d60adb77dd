package oip_test

import (
	"errors"
	"fmt"

	"github.com/torchd/torchd/oip"
)

// A server's infer handler, stripped of HTTP: decode, run the model, encode.
func Example() {
	// What arrives: a JSON request, no Inference-Header-Content-Length, no Content-Encoding.
	body := []byte(`{"id":"1","inputs":[{"name":"x","shape":[2,2],"datatype":"INT32","data":[[1,2],[3,4]]}],
		"outputs":[{"name":"y","parameters":{"binary_data":false}}]}`)
	headerLen := -1

	req, ins, err := oip.DecodeRequest(body, headerLen, "", 0)
	if errors.Is(err, oip.ErrRawRequest) {
		// Answer with oip.DecodeRawRequest and the model's one input instead.
	} else if errors.Is(err, oip.ErrBadRequest) {
		fmt.Println(400, err)
		return
	}

	// The "model": y is x, as INT64.
	y := oip.Tensor{Name: "y", Datatype: "INT64", Shape: ins[0].Shape, Data: make([]byte, 0, 32)}
	for i := 0; i < len(ins[0].Data); i += 4 {
		y.Data = append(y.Data, ins[0].Data[i:i+4]...)
		y.Data = append(y.Data, 0, 0, 0, 0)
	}

	out, hl, err := oip.EncodeResponse(&oip.InferResponse{ModelName: "m", ID: req.ID}, []oip.Tensor{y}, req.WantsBinary)
	if err != nil {
		fmt.Println(500, err)
		return
	}
	fmt.Println(hl) // -1: no Inference-Header-Content-Length to send
	fmt.Println(string(out))
	// Output:
	// -1
	// {"model_name":"m","id":"1","outputs":[{"name":"y","datatype":"INT64","shape":[2,2],"data":[1,2,3,4]}]}
}
