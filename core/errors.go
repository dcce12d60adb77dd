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
	ErrQueueFull       = errors.New("queue full")
	ErrNoWorker        = errors.New("no worker")
	ErrUnregistered    = errors.New("model was unregistered")
	ErrDeadline        = errors.New("request deadline passed while queued")
	ErrClientGone      = errors.New("client disconnected while queued")
	ErrInference       = errors.New("inference failed") // the handler or the model
)

// Error is an error of one of the kinds above with its message. Status is the HTTP status a
// handler attached to its error (handlers.StatusOf), which the front-ends keep; 0: none.
type Error struct {
	Kind   error
	Status int
	Msg    string
}

func (e *Error) Error() string { return e.Msg }
func (e *Error) Unwrap() error { return e.Kind }

func errorf(kind error, format string, args ...any) *Error {
	return &Error{Kind: kind, Msg: fmt.Sprintf(format, args...)}
}
