package frontend

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/oip"
)

// GRPCCall is a gRPC request's call: a client that cancelled is gone, and its deadline is
// its own time limit, which the batcher enforces as it does X-Request-Timeout. A traced call
// (TraceUnary) carries its trace.
func GRPCCall(ctx context.Context) core.Call {
	arrived := time.Now()
	c := core.Call{Gone: func() bool { return errors.Is(ctx.Err(), context.Canceled) }}
	if r := GRPCTrace(ctx); r != nil {
		c.Trace = r
	}
	if dl, ok := ctx.Deadline(); ok {
		c.Timeout = func() (time.Duration, error) {
			// A deadline already past still expires the request, rather than lifting its limit.
			return max(dl.Sub(arrived), time.Nanosecond), nil
		}
	}
	return c
}

// GRPCCodes is both gRPC front-ends' table: the core's kinds as gRPC status codes, as
// Triton maps its errors.
var GRPCCodes = KindTable[codes.Code]{
	{core.ErrModelNotFound, codes.NotFound},
	{core.ErrVersionNotFound, codes.NotFound},
	{core.ErrLoading, codes.Unavailable},
	{core.ErrConflict, codes.AlreadyExists},
	{core.ErrDefaultVersion, codes.PermissionDenied},
	{core.ErrBadModel, codes.InvalidArgument},
	{core.ErrLoadFailed, codes.Internal},
	{core.ErrStartupTimeout, codes.Internal},
	{core.ErrBadInput, codes.InvalidArgument},
	{core.ErrTooLarge, codes.ResourceExhausted},
	{core.ErrUnsupported, codes.Unimplemented},
	{core.ErrQueueFull, codes.Unavailable},
	{core.ErrNoWorker, codes.Unavailable},
	{core.ErrUnregistered, codes.Unavailable},
	{core.ErrDeadline, codes.DeadlineExceeded},
	{core.ErrClientGone, codes.Canceled},
	{core.ErrInference, codes.Internal},
	{core.ErrControlOff, codes.Unavailable},
}

// grpcCode is the gRPC status for an HTTP status: a handler's own code (a TorchServe
// handler's answer), and a front-end's own APIError.
func grpcCode(httpStatus int) codes.Code {
	switch httpStatus {
	case 400:
		return codes.InvalidArgument
	case 401:
		return codes.Unauthenticated
	case 403:
		return codes.PermissionDenied
	case 404:
		return codes.NotFound
	case 408, 504:
		return codes.DeadlineExceeded
	case 409:
		return codes.AlreadyExists
	case 413, 429, 507:
		return codes.ResourceExhausted
	case StatusClientClosed:
		return codes.Canceled
	case 501:
		return codes.Unimplemented
	case 503:
		return codes.Unavailable
	}
	if httpStatus >= 400 && httpStatus < 500 {
		return codes.InvalidArgument
	}
	return codes.Internal
}

// GRPCError is err as a gRPC status: by the code a handler gave its own error, or by its
// kind (GRPCCodes); a malformed request is INVALID_ARGUMENT, anything else INTERNAL.
func GRPCError(err error) error {
	var ce *core.Error
	if errors.As(err, &ce) && ce.HandlerCode != 0 {
		return status.Error(grpcCode(ce.HandlerCode), err.Error())
	}
	if code, ok := GRPCCodes.Of(err); ok {
		return status.Error(code, err.Error())
	}
	var ae *APIError
	switch {
	case errors.As(err, &ae):
		return status.Error(grpcCode(ae.Status), ae.Msg)
	case errors.Is(err, oip.ErrBadRequest):
		return status.Error(codes.InvalidArgument, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}
