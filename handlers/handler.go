// Package handlers turns request bytes into model inputs and model outputs into response
// bytes, one kind of model per handler, as MMS and TorchServe handlers do.
//
// A request goes Preprocess → Infer → Postprocess. Preprocess and Postprocess run per
// request, in the request's goroutine, in parallel; only Infer runs on a worker, once per
// batch. Handlers know bytes and tensors, nothing of HTTP servers, queues or workers.
package handlers

import (
	"errors"
	"fmt"
	"iter"
	"sort"
	"sync"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/errkind"
	"github.com/torchd/torchd/torch"
)

// Request is what a handler sees of one inference request.
type Request struct {
	// Inputs are the request's payloads: the raw body, or one per multipart file or form
	// field. Several inputs in one request are inferred as several items of one batch.
	Inputs []Payload
	// Header returns a request header ("" when absent).
	Header func(name string) string
	// Headers and Query, when set, visit every header and query argument: what a handler
	// process passes to a TorchServe handler (its request headers, and query arguments as
	// parameters). nil: none.
	Headers, Query iter.Seq2[string, string]
	// Canceled reports that the client has gone; nil: never. A handler that decodes many
	// inputs checks it between them and returns ErrCanceled.
	Canceled func() bool
	// Stream, when set, takes the parts a streaming handler sends before its final answer
	// (TorchServe's send_intermediate_predict_response), in order, on the worker's goroutine:
	// it must not block. The final Response is then the last part only. nil: the parts are
	// joined into the final Response. Only handler processes stream.
	Stream func(part Response)
	// Rows, when set, are the request's rows of a handler batch, each its fields as JSON
	// payloads, as TorchServe's KServe envelopes hand a handler each instance (v1) or input
	// (v2). Only a RowTaker gets them, in place of Inputs; its answer is the JSON list of the
	// rows' answers, in order.
	Rows [][]Payload
	// Row, when set, lends the memory for a request whose model input is one row of size
	// bytes: memory beside the rows of the requests queued around it, so that their batch
	// runs on it where it lies instead of being copied together (Stage.Stack). Its release
	// is the Sample's Release, and is also called where Preprocess fails after taking it.
	// nil, or a nil mem: the handler uses memory of its own. mem is reused, not zeroed: the
	// handler writes all of it, and nothing past its length (its capacity runs on into the
	// next request's row).
	Row func(size int) (mem []byte, release func())
}

// RowTaker is implemented by handlers that take a request as rows of their batch
// (Request.Rows): TorchServe's Python handlers, which see KServe requests through its
// envelopes.
type RowTaker interface {
	TakesRows()
}

// TakesRows reports whether h takes requests as rows (RowTaker).
func TakesRows(h Handler) bool {
	_, ok := h.(RowTaker)
	return ok
}

// ErrCanceled is returned by Preprocess when the request's client went away while its
// inputs were being decoded: the rest of the work is not done.
var ErrCanceled = errors.New("client disconnected while its request was being decoded")

// Payload is one input of a request.
type Payload struct {
	Name        string // form field name, "body" for a raw body
	ContentType string
	Data        []byte
}

// Tensor is a dense row-major tensor in Go memory. Data is little-endian, as LibTorch's.
type Tensor struct {
	DType torch.DType
	Shape []int64
	Data  []byte
	// Name is an output's name where the model gave one (the key of a dict it returned).
	Name string
}

// Numel returns the number of elements its shape holds.
func (t Tensor) Numel() int64 {
	n := int64(1)
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// Sample is one request's model input: Items rows, each input tensor having Items as its
// leading dimension. The default Infer concatenates the samples of a batch along it.
type Sample struct {
	Items   int
	Tensors []Tensor
	// State carries what Postprocess needs from Preprocess (e.g. which input was text).
	State any
	// Release, when set, gives the tensors' memory back to the pool it came from (the image
	// handlers' inputs): core calls it once no worker will read them again, before the
	// request is answered, so Postprocess must not read Tensors of a sample that has one.
	// Where core never calls it (a job still in a forward when its worker was abandoned),
	// the memory is the garbage collector's.
	Release func()
}

// Response is a handler's answer to one request.
type Response struct {
	Status      int // 0 means 200
	ContentType string
	Body        []byte
}

// Handler is one kind of model.
type Handler interface {
	// Preprocess decodes and validates one request. Its errors are the client's (400).
	Preprocess(r *Request) (*Sample, error)
	// Postprocess turns a request's share of the batch output (each tensor's leading
	// dimension is s.Items) into its response.
	Postprocess(s *Sample, out []Tensor) (*Response, error)
}

// Inferer is implemented by handlers that run a batch themselves instead of the default
// concatenate → forward → split, e.g. to pad text or call a scripted generate method.
type Inferer interface {
	Infer(m torch.Model, batch []*Sample) ([][]Tensor, error)
}

// OutputSelector is implemented by handlers whose model returns more than the tensors they
// read, e.g. a segmentation model's Dict[str, Tensor] of "out" and "aux": SelectOutputs picks
// the tensors to split per sample (Postprocess's out) from the model's output, in the default
// concatenate → forward → split step. It must not close what it returns.
type OutputSelector interface {
	SelectOutputs(v any) ([]*torch.Tensor, error)
}

// ModelBinder is implemented by handlers that run more than the archive's serialized file,
// e.g. the captioner's encoder package beside its TorchScript decoder. BindModel takes the
// loaded model and returns the one the workers run, which then owns m (on an error, m is
// still the caller's); runners is how many workers may run it at once.
type ModelBinder interface {
	BindModel(m torch.Model, runners int) (torch.Model, error)
}

// Bind returns the model h runs: BindModel's when h is a ModelBinder, else m.
func Bind(h Handler, m torch.Model, runners int) (torch.Model, error) {
	if b, ok := h.(ModelBinder); ok {
		return b.BindModel(m, runners)
	}
	return m, nil
}

// TensorPreprocessor is implemented by handlers that also take a request's input as a
// tensor, as TorchServe's handlers take a KServe v2 input's data. Its errors are the
// client's (400), as Preprocess's.
type TensorPreprocessor interface {
	PreprocessTensor(t Tensor) (*Sample, error)
}

// The handlers that run batches, bind models or select outputs themselves: a signature that
// drifts from Inferer's, ModelBinder's or OutputSelector's would silently fall back to the
// default.
var (
	_ Inferer        = (*ImageCaptioner)(nil)
	_ Inferer        = (*TextClassifier)(nil)
	_ Inferer        = (*TextEmbedding)(nil)
	_ ModelBinder    = (*ImageCaptioner)(nil)
	_ Inferer        = (*ObjectDetector)(nil)
	_ OutputSelector = (*ImageSegmenter)(nil)
)

// Error is a handler's error: its kind (errkind.BadInput when the request's input is at
// fault; nil: the handler or model failed, errkind.Inference) and the code the handler
// answered it with itself, as TorchServe's handlers do (PredictionException's code,
// context.set_response_status); 0: none. The code is data of the kind, for TorchServe's
// front-end to answer with: nothing classifies by it.
type Error struct {
	Kind error
	Code int
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

// Unwrap gives the kind to errors.Is.
func (e *Error) Unwrap() error { return e.Kind }

// BadInput returns an error of kind errkind.BadInput: the request's input is at fault.
func BadInput(format string, args ...any) error {
	return &Error{Kind: errkind.BadInput, Msg: fmt.Sprintf(format, args...)}
}

// Failed returns an error of kind errkind.Inference: the handler or its model failed.
func Failed(format string, args ...any) error {
	return &Error{Kind: errkind.Inference, Msg: fmt.Sprintf(format, args...)}
}

// Answered is a handler's answer that failed with its own code, as TorchServe's handlers
// answer (a PredictionException, a status of 400 or above): its kind is what TorchServe
// makes of the code, the client's input for a 4xx and the handler's failure otherwise.
func Answered(code int, msg string) error {
	kind := errkind.Inference
	if code >= 400 && code < 500 {
		kind = errkind.BadInput
	}
	return &Error{Kind: kind, Code: code, Msg: msg}
}

// Context is what a handler is built from.
type Context struct {
	// Config is the archive's model config; handlers read their options with its
	// IntOption, FloatsOption, ... which name the file and key in errors.
	Config archive.ModelConfig
	// Dir is the extracted archive, for label files and vocabularies.
	Dir string
	// Labels maps class index to name, from index_to_name.json; nil when absent.
	Labels map[int]string
}

// Warmer is implemented by handlers that know an input of the model's shape, used to warm
// each worker up before it takes requests.
type Warmer interface {
	WarmupSample() *Sample
}

// Factory builds a handler for one model, validating its options.
type Factory func(ctx Context) (Handler, error)

var (
	mu        sync.RWMutex
	factories = map[string]Factory{}
)

// Register makes a handler available by name. It panics on a duplicate name, as
// registering twice is a programming error.
func Register(name string, f Factory) {
	mu.Lock()
	defer mu.Unlock()
	if _, dup := factories[name]; dup {
		panic("handlers: duplicate handler " + name)
	}
	factories[name] = f
	archive.RegisterHandlerName(name)
}

// New builds the named handler.
func New(name string, ctx Context) (Handler, error) {
	mu.RLock()
	f, ok := factories[name]
	mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("unknown handler %q (torchd has: %v)", name, Names())
	}
	return f(ctx)
}

// Names lists the registered handlers, sorted.
func Names() []string {
	mu.RLock()
	defer mu.RUnlock()
	names := make([]string, 0, len(factories))
	for n := range factories {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// intOptions reads several integer options in a row: after the first error every get
// returns its default, and err reports that first error.
type intOptions struct {
	cfg *archive.ModelConfig
	err error
}

func (o *intOptions) get(key string, def int) int {
	if o.err != nil {
		return def
	}
	v, err := o.cfg.IntOption(key, def)
	o.err = err
	return v
}

// TextSampler is implemented by handlers whose model takes text: the Open Inference
// Protocol's BYTES input, one text per element, reaches the model through it rather than
// as a tensor.
type TextSampler interface {
	TextSample(texts []string) (*Sample, error)
}

// ZeroSample is one row of zeros of the given inputs, variable dimensions as 1: a warm-up
// input for a model whose handler has none of its own. A string element of zeros is an empty
// string (its 4-byte length, 0). The product of each shape is checked as a whole: each
// dimension alone may be in range.
func ZeroSample(ins []archive.TensorSpec) (*Sample, error) {
	s := &Sample{Items: 1}
	for _, in := range ins {
		dt, err := torch.ParseDType(in.DType)
		if err != nil {
			return nil, err
		}
		size := int64(dt.Size())
		if dt == torch.Bytes {
			size = 4
		}
		n, err := archive.SampleBytes(in.Shape, size)
		if err != nil {
			return nil, fmt.Errorf("input %q: %v", in.Name, err)
		}
		shape := make([]int64, len(in.Shape))
		for i, d := range in.Shape {
			shape[i] = max(d, 1)
		}
		if len(shape) == 0 || shape[0] != 1 {
			shape = append([]int64{1}, shape...)
		}
		s.Tensors = append(s.Tensors, Tensor{DType: dt, Shape: shape, Data: make([]byte, n)})
	}
	return s, nil
}
