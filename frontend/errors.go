package frontend

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/valyala/fasthttp"

	"github.com/torchd/torchd/core"
)

// StatusClientClosed counts a request whose client disconnected before its answer (nginx's
// and TorchServe's 499, "client closed request"). It is never seen by the client; it keeps
// such requests out of the 200s in the metrics and the access log.
const StatusClientClosed = 499

// APIError is an error with the HTTP status and TorchServe exception type it is answered with.
type APIError struct {
	Status int
	Type   string
	Msg    string
}

func (e *APIError) Error() string { return e.Msg }

// APIErrorf is an APIError with a formatted message: a TorchServe answer of the front-end's own,
// outside the core's kinds.
func APIErrorf(status int, typ, format string, args ...any) *APIError {
	return &APIError{Status: status, Type: typ, Msg: fmt.Sprintf(format, args...)}
}

// APIErrorOf is the TorchServe REST answer to an error: the core's kinds map to TorchServe's
// statuses and exception names (TorchServeAnswers); an APIError is answered as it is. It is the
// answer of every REST route outside the Open Inference Protocol's and OpenAI's (the router's
// 404 and 405, authorization, management), and the metrics' code label.
func APIErrorOf(err error) *APIError {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae
	}
	a, ok := TorchServeAnswers.Of(err)
	if !ok {
		a = TorchServeAnswer{500, "InternalServerException"}
	}
	var ce *core.Error
	if errors.As(err, &ce) && ce.HandlerCode != 0 {
		// TorchServe answers with the code a handler gave its own error; a 4xx is the client's.
		a.Status = ce.HandlerCode
		if a.Status < 500 {
			a.Type = "BadRequestException"
		}
	}
	return &APIError{Status: a.Status, Type: a.Type, Msg: err.Error()}
}

// HTTPStatus is the HTTP status an inference request that ended with err (nil: answered) is
// counted under in the metrics: TorchServe's REST answer to it.
func HTTPStatus(err error) int {
	if err == nil {
		return 200
	}
	return APIErrorOf(err).Status
}

// TorchServeAnswer is TorchServe's REST answer to an error: its status and exception name.
type TorchServeAnswer struct {
	Status int
	Type   string
}

// TorchServeAnswers is TorchServe's REST table: the core's kinds as its statuses and
// exception names.
var TorchServeAnswers = KindTable[TorchServeAnswer]{
	{core.ErrModelNotFound, TorchServeAnswer{404, "ModelNotFoundException"}},
	{core.ErrVersionNotFound, TorchServeAnswer{404, "ModelVersionNotFoundException"}},
	{core.ErrLoading, TorchServeAnswer{503, "ServiceUnavailableException"}},
	{core.ErrConflict, TorchServeAnswer{409, "ConflictStatusException"}},
	{core.ErrDefaultVersion, TorchServeAnswer{403, "InvalidModelVersionException"}},
	{core.ErrBadModel, TorchServeAnswer{400, "ModelException"}},
	{core.ErrLoadFailed, TorchServeAnswer{500, "InternalServerException"}},
	{core.ErrStartupTimeout, TorchServeAnswer{500, "InternalServerException"}},
	{core.ErrBadInput, TorchServeAnswer{400, "BadRequestException"}},
	{core.ErrTooLarge, TorchServeAnswer{413, "RequestEntityTooLargeException"}},
	{core.ErrUnsupported, TorchServeAnswer{501, "NotImplementedException"}},
	{core.ErrQueueFull, TorchServeAnswer{503, "ServiceUnavailableException"}},
	{core.ErrNoWorker, TorchServeAnswer{503, "ServiceUnavailableException"}},
	{core.ErrUnregistered, TorchServeAnswer{503, "ServiceUnavailableException"}},
	{core.ErrDeadline, TorchServeAnswer{504, "RequestTimeoutException"}},
	{core.ErrClientGone, TorchServeAnswer{StatusClientClosed, "ClientClosedRequest"}},
	{core.ErrInference, TorchServeAnswer{500, "InternalServerException"}},
	{core.ErrControlOff, TorchServeAnswer{503, "ServiceUnavailableException"}},
}

// JSONBody is v as the TorchServe APIs' JSON body, 2-space indented and ending in a newline;
// the gRPC management answers carry the same bytes.
func JSONBody(v any) ([]byte, error) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// WriteJSON writes v as TorchServe does (JSONBody).
func WriteJSON(ctx *fasthttp.RequestCtx, status int, v any) {
	b, err := JSONBody(v)
	if err != nil {
		status, b = 500, []byte(`{"code": 500, "type": "InternalServerException", "message": "response encoding failed"}`+"\n")
	}
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}

// StatusMessage is TorchServe's {"status": msg} answer.
func StatusMessage(msg string) map[string]string { return map[string]string{"status": msg} }

// StatusBody is StatusMessage(msg) as a JSON body.
func StatusBody(msg string) []byte {
	b, _ := JSONBody(StatusMessage(msg)) // a map of strings always encodes
	return b
}

// errorBody is TorchServe's error shape.
type errorBody struct {
	Code    int    `json:"code"`
	Type    string `json:"type"`
	Message string `json:"message"`
}

// WriteTorchServeError answers in TorchServe's error shape.
func WriteTorchServeError(ctx *fasthttp.RequestCtx, status int, typ, msg string) {
	WriteJSON(ctx, status, errorBody{Code: status, Type: typ, Message: msg})
}

// WriteAPIError answers err in TorchServe's error shape (APIErrorOf); a 503 asks the client
// to retry after a second.
func WriteAPIError(ctx *fasthttp.RequestCtx, err error) {
	ae := APIErrorOf(err)
	if ae.Status == 503 {
		ctx.Response.Header.Set("Retry-After", "1")
	}
	WriteTorchServeError(ctx, ae.Status, ae.Type, ae.Msg)
}

// WriteStatus answers TorchServe's {"status": msg}.
func WriteStatus(ctx *fasthttp.RequestCtx, code int, status string) {
	WriteJSON(ctx, code, StatusMessage(status))
}
