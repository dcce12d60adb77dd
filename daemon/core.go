package daemon

import (
	"errors"
	"fmt"

	"github.com/torchd/torchd/core"
)

// The serving core's types, as the front-ends and their tests name them.
type (
	ModelVersion    = core.ModelVersion
	RegisterRequest = core.RegisterRequest
	ModelStatistics = core.ModelStatistics
)

// statusClientClosed counts a request whose client disconnected before its answer (nginx's
// and TorchServe's 499, "client closed request"). It is never seen by the client; it keeps
// such requests out of the 200s in the metrics and the access log.
const statusClientClosed = 499

// apiErrorOf is the TorchServe REST answer to an error: the core's kinds map to TorchServe's
// statuses and exception names (errorKinds); an APIError is answered as it is.
func apiErrorOf(err error) *APIError {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae
	}
	status, typ := 500, "InternalServerException"
	for _, k := range errorKinds {
		if errors.Is(err, k.kind) {
			status, typ = k.status, k.typ
			break
		}
	}
	var ce *core.Error
	if errors.As(err, &ce) && ce.Status != 0 {
		// A handler's own status: a 4xx is the client's.
		status = ce.Status
		if status < 500 {
			typ = "BadRequestException"
		}
	}
	return &APIError{Status: status, Type: typ, Msg: err.Error()}
}

// httpStatus is the HTTP status an inference request that ended with err (nil: answered) is
// counted under in the metrics: TorchServe's REST answer to it.
func httpStatus(err error) int {
	if err == nil {
		return 200
	}
	return apiErrorOf(err).Status
}

// errorKinds is TorchServe's REST table: the core's kinds as its statuses and exception names.
var errorKinds = []struct {
	kind   error
	status int
	typ    string
}{
	{core.ErrModelNotFound, 404, "ModelNotFoundException"},
	{core.ErrVersionNotFound, 404, "ModelVersionNotFoundException"},
	{core.ErrLoading, 503, "ServiceUnavailableException"},
	{core.ErrConflict, 409, "ConflictStatusException"},
	{core.ErrDefaultVersion, 403, "InvalidModelVersionException"},
	{core.ErrBadModel, 400, "ModelException"},
	{core.ErrLoadFailed, 500, "InternalServerException"},
	{core.ErrStartupTimeout, 500, "InternalServerException"},
	{core.ErrBadInput, 400, "BadRequestException"},
	{core.ErrTooLarge, 413, "RequestEntityTooLargeException"},
	{core.ErrUnsupported, 501, "NotImplementedException"},
	{core.ErrQueueFull, 503, "ServiceUnavailableException"},
	{core.ErrNoWorker, 503, "ServiceUnavailableException"},
	{core.ErrUnregistered, 503, "ServiceUnavailableException"},
	{core.ErrDeadline, 504, "RequestTimeoutException"},
	{core.ErrClientGone, statusClientClosed, "ClientClosedRequest"},
	{core.ErrInference, 500, "InternalServerException"},
	{core.ErrControlOff, 503, "ServiceUnavailableException"},
}

// APIError is an error with the HTTP status and TorchServe exception type it is answered with.
type APIError struct {
	Status int
	Type   string
	Msg    string
}

func (e *APIError) Error() string { return e.Msg }

func apiErr(status int, typ, format string, args ...any) *APIError {
	return &APIError{Status: status, Type: typ, Msg: fmt.Sprintf(format, args...)}
}
