// Package oip is the Open Inference Protocol (KServe v2) over HTTP/REST, with Triton's binary
// tensor data extension: request/response JSON types and the body codec shared by torchd's
// server and its client; and the same requests and tensors to and from the protocol's gRPC
// messages (grpc.go). It knows nothing of HTTP or gRPC servers, or of LibTorch.
//
// A body is a JSON header, optionally followed by raw tensor data. When binary data is present
// the Inference-Header-Content-Length header gives the JSON's length; each binary tensor
// carries the parameter "binary_data_size", and their bytes follow the JSON, concatenated in
// the order the tensors appear in it. Tensor bytes are little-endian and row-major with no
// padding; BOOL is one byte per element; a BYTES element is a 4-byte little-endian length
// followed by that many bytes.
package oip

import (
	"errors"
	"fmt"
)

// Parameters are the protocol's "$parameters" objects: string keys to string, number or bool
// values. Numbers decoded from JSON are float64.
type Parameters map[string]any

// Parameter names this package reads and writes (Triton's binary tensor data extension).
const (
	// ParamBinaryDataSize on an input or output: the tensor's bytes follow the JSON header.
	ParamBinaryDataSize = "binary_data_size"
	// ParamBinaryData on a requested output: true asks for that output as binary data.
	ParamBinaryData = "binary_data"
	// ParamBinaryDataOutput on a request: true asks for every output as binary data,
	// unless the output's own ParamBinaryData says otherwise.
	ParamBinaryDataOutput = "binary_data_output"
)

type RequestInput struct {
	Name       string     `json:"name"`
	Shape      []int64    `json:"shape"`
	Datatype   string     `json:"datatype"`
	Parameters Parameters `json:"parameters,omitempty"`
	Data       any        `json:"data,omitempty"`
}

type RequestOutput struct {
	Name       string     `json:"name"`
	Parameters Parameters `json:"parameters,omitempty"`
}

type InferRequest struct {
	ID         string          `json:"id,omitempty"`
	Parameters Parameters      `json:"parameters,omitempty"`
	Inputs     []RequestInput  `json:"inputs"`
	Outputs    []RequestOutput `json:"outputs,omitempty"`
}

type ResponseOutput struct {
	Name       string     `json:"name"`
	Shape      []int64    `json:"shape"`
	Datatype   string     `json:"datatype"`
	Parameters Parameters `json:"parameters,omitempty"`
	Data       any        `json:"data,omitempty"`
}

type InferResponse struct {
	ModelName    string           `json:"model_name"`
	ModelVersion string           `json:"model_version,omitempty"`
	ID           string           `json:"id,omitempty"`
	Parameters   Parameters       `json:"parameters,omitempty"`
	Outputs      []ResponseOutput `json:"outputs"`
}

// ErrorResponse is the body of every failed request.
type ErrorResponse struct {
	Error string `json:"error"`
}

// MetadataTensor describes one model input or output; -1 in Shape is a variable dimension.
type MetadataTensor struct {
	Name     string  `json:"name"`
	Datatype string  `json:"datatype"`
	Shape    []int64 `json:"shape"`
}

type ModelMetadata struct {
	Name     string           `json:"name"`
	Versions []string         `json:"versions,omitempty"`
	Platform string           `json:"platform"`
	Inputs   []MetadataTensor `json:"inputs"`
	Outputs  []MetadataTensor `json:"outputs"`
}

// ServerMetadata is the body of GET /v2. Extensions must be present, even empty: perf_analyzer
// fails on a reply without it.
type ServerMetadata struct {
	Name       string   `json:"name"`
	Version    string   `json:"version"`
	Extensions []string `json:"extensions"`
}

// Tensor is one decoded tensor. Data holds raw little-endian row-major bytes for fixed-size
// datatypes; for BYTES it holds the elements as on the wire (each a 4-byte little-endian length then the bytes).
type Tensor struct {
	Name     string
	Datatype string // BOOL, UINT8, UINT16, UINT32, UINT64, INT8, INT16, INT32, INT64, FP16, FP32, FP64, BF16, BYTES
	Shape    []int64
	Data     []byte
}

// HeaderContentLength is the HTTP header giving the JSON header's length in a body that also
// carries binary tensor data. Its value 0 marks a raw binary request (see DecodeRawRequest).
const HeaderContentLength = "Inference-Header-Content-Length"

// DefaultMaxBody is the body limit used when a caller passes maxBody <= 0: Triton's default
// --http-max-input-size.
const DefaultMaxBody = 64 << 20

var (
	// ErrBadRequest is wrapped by every error about malformed client input; the server
	// answers it with HTTP 400.
	ErrBadRequest = errors.New("bad request")
	// ErrBodyTooLarge is wrapped by the error for a body whose decompressed size exceeds
	// maxBody. It wraps ErrBadRequest too; a server may prefer to answer it with 413.
	ErrBodyTooLarge = fmt.Errorf("%w: body too large", ErrBadRequest)
	// ErrRawRequest is returned by DecodeRequest for Inference-Header-Content-Length: 0, a raw
	// binary request, which cannot be decoded without the model's input description: the
	// server decodes it with DecodeRawRequest. It is not a bad request.
	ErrRawRequest = errors.New("raw binary request (Inference-Header-Content-Length: 0): decode it with DecodeRawRequest")
	// ErrBadResponse is wrapped by every error about a malformed response body.
	ErrBadResponse = errors.New("bad response")
)

// codecError is a message for the peer that wraps a sentinel. Its text is the message alone,
// because the server sends it as {"error": ...} and a "bad request: " prefix says nothing there.
type codecError struct {
	kind error
	msg  string
}

func (e *codecError) Error() string { return e.msg }
func (e *codecError) Unwrap() error { return e.kind }

func errorf(kind error, format string, args ...any) error {
	return &codecError{kind: kind, msg: fmt.Sprintf(format, args...)}
}

// IsRaw reports whether an Inference-Header-Content-Length value marks a raw binary request.
// headerLen is -1 when the header is absent.
func IsRaw(headerLen int) bool { return headerLen == 0 }

// DatatypeSize returns the bytes per element of datatype: 0 for BYTES, whose elements vary,
// and -1 for a datatype the protocol does not define.
func DatatypeSize(datatype string) int {
	switch datatype {
	case "BOOL", "UINT8", "INT8":
		return 1
	case "UINT16", "INT16", "FP16", "BF16":
		return 2
	case "UINT32", "INT32", "FP32":
		return 4
	case "UINT64", "INT64", "FP64":
		return 8
	case "BYTES":
		return 0
	}
	return -1
}

// jsonable reports whether the spec lets datatype travel as JSON numbers; FP16 and BF16 have
// no JSON form and always go binary.
func jsonable(datatype string) bool { return datatype != "FP16" && datatype != "BF16" }

// WantsBinary reports whether the requested output name should be sent as binary data: the
// output's own "binary_data" parameter if it has one, else the request's "binary_data_output".
// EncodeResponse sends FP16 and BF16 binary whatever this says. Its method value is the
// binary argument of EncodeResponse.
func (r *InferRequest) WantsBinary(name string) bool {
	for _, o := range r.Outputs {
		if o.Name == name {
			if b, ok := o.Parameters[ParamBinaryData].(bool); ok {
				return b
			}
			break
		}
	}
	b, _ := r.Parameters[ParamBinaryDataOutput].(bool)
	return b
}

// ElementCount returns the number of elements of shape, or an error for a negative dimension
// or a product that does not fit an int64. A zero dimension makes the count 0 whatever the
// other dimensions are.
func ElementCount(shape []int64) (int64, error) {
	for _, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("negative dimension %d in shape %v", d, shape)
		}
		if d == 0 {
			return 0, nil
		}
	}
	n := int64(1)
	for _, d := range shape {
		if n > maxInt/d {
			return 0, fmt.Errorf("shape %v has too many elements", shape)
		}
		n *= d
	}
	return n, nil
}

// maxInt bounds element counts and byte sizes, so both fit an int on every platform Go runs on
// and slices can be made from them.
const maxInt = int64(^uint(0) >> 1)
