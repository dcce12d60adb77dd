package core

import (
	"errors"
	"fmt"
)

// The core's errors name what went wrong, not how a protocol answers it: each front-end maps
// them to its own status codes and exception names (errors.Is on the kind).
var (
	ErrModelNotFound   = errors.New("model not found")
	ErrVersionNotFound = errors.New("model version not found")
	ErrLoading         = errors.New("model is still loading")
	ErrConflict        = errors.New("model version already registered")
	ErrDefaultVersion  = errors.New("the default version cannot be removed while others exist")
	ErrBadModel        = errors.New("model cannot be served") // the archive, its settings or its handler
	ErrLoadFailed      = errors.New("model failed to load")   // LibTorch's error, or the warm-up forward's
	ErrStartupTimeout  = errors.New("workers did not start within startup_timeout")
	ErrBadInput        = errors.New("bad request") // the client's input
	ErrTooLarge        = errors.New("request too large")
	ErrUnsupported     = errors.New("not supported by the model") // e.g. an explanation its handler cannot give
	ErrQueueFull       = errors.New("queue full")
	ErrNoWorker        = errors.New("no worker")
	ErrUnregistered    = errors.New("model was unregistered")
	ErrDeadline        = errors.New("request deadline passed while queued")
	ErrClientGone      = errors.New("client disconnected while queued")
	ErrInference       = errors.New("inference failed")     // the handler or the model
	ErrControlOff      = errors.New("model control is off") // load and unload need explicit model control
)

// Error is an error of one of the kinds above with its message. Status is the code a
// handler gave its own error (handlers.Error: a TorchServe handler's answer), which a
// protocol that speaks HTTP may keep; 0: none. The core itself never reads it.
type Error struct {
	Kind   error
	Status int
	Msg    string
	cause  error // the front-end's own error this one wraps, for its errors.As; nil: none
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
var Kinds = []error{ErrModelNotFound, ErrVersionNotFound, ErrLoading, ErrConflict, ErrDefaultVersion,
	ErrBadModel, ErrLoadFailed, ErrStartupTimeout, ErrBadInput, ErrTooLarge, ErrUnsupported,
	ErrQueueFull, ErrNoWorker, ErrUnregistered, ErrDeadline, ErrClientGone, ErrInference, ErrControlOff}
