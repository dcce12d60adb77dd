package core

import (
	"errors"
	"fmt"

	"github.com/torchd/torchd/errkind"
	"github.com/torchd/torchd/handlers"
)

// The core's errors name what went wrong, not how a protocol answers it: each front-end maps
// them to its own status codes and exception names (errors.Is on the kind). They are
// errkind's, so that handlers and handler processes below the core return the same kinds.
var (
	ErrModelNotFound   = errkind.ModelNotFound
	ErrVersionNotFound = errkind.VersionNotFound
	ErrLoading         = errkind.Loading
	ErrConflict        = errkind.Conflict
	ErrDefaultVersion  = errkind.DefaultVersion
	ErrBadModel        = errkind.BadModel
	ErrLoadFailed      = errkind.LoadFailed
	ErrStartupTimeout  = errkind.StartupTimeout
	ErrBadInput        = errkind.BadInput
	ErrTooLarge        = errkind.TooLarge
	ErrUnsupported     = errkind.Unsupported
	ErrQueueFull       = errkind.QueueFull
	ErrNoWorker        = errkind.NoWorker
	ErrUnregistered    = errkind.Unregistered
	ErrDeadline        = errkind.Deadline
	ErrClientGone      = errkind.ClientGone
	ErrInference       = errkind.Inference
	ErrControlOff      = errkind.ControlOff
)

// Error is an error of one of the kinds above with its message. HandlerCode is the code a
// handler answered its own error with (handlers.Error.Code: a TorchServe handler's
// PredictionException or set_response_status), which TorchServe's front-end answers with;
// 0: none. It is data of the kind: the core never classifies by it.
type Error struct {
	Kind        error
	HandlerCode int
	Msg         string
	cause       error // the error this one wraps (a front-end's, a handler's), for errors.As; nil: none
}

func (e *Error) Error() string { return e.Msg }

// Unwrap gives the kind, and the wrapped error, to errors.Is and errors.As.
func (e *Error) Unwrap() []error {
	if e.cause == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.cause}
}

func errorf(kind error, format string, args ...any) *Error {
	return &Error{Kind: kind, Msg: fmt.Sprintf(format, args...)}
}

// Errorf is an error of kind with its message, for a front-end's Decode or Encode to say
// which kind its error is.
func Errorf(kind error, format string, args ...any) error { return errorf(kind, format, args...) }

// WithKind is err as an error of kind, its message unchanged and err still reachable by
// errors.As; an error that already has a kind of the core's keeps it.
func WithKind(err error, kind error) error { return withKind(err, kind) }

func withKind(err error, kind error) error {
	for _, k := range Kinds {
		if errors.Is(err, k) {
			return err
		}
	}
	return &Error{Kind: kind, Msg: err.Error(), cause: err}
}

// Kinds lists every kind, for the protocols' tables to be checked against.
var Kinds = errkind.All

// handlerError is a handler's error as the core's, with message msg: of the kind it has
// (a handlers.Error's), else of kind, with the code the handler answered it with.
func handlerError(err error, kind error, msg string) *Error {
	e := &Error{Kind: kind, Msg: msg, cause: err}
	for _, k := range Kinds {
		if errors.Is(err, k) {
			e.Kind = k
			break
		}
	}
	var he *handlers.Error
	if errors.As(err, &he) {
		e.HandlerCode = he.Code
	}
	return e
}
