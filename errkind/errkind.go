// Package errkind names the kinds of error every layer of torchd speaks: what went wrong, never
// how a protocol answers it. core re-exports them (core.ErrBadInput is errkind.BadInput), and the
// packages below core (handlers, handler processes, runtimes) return them too, so a handler's
// error reaches each front-end's table by errors.Is without a status on the way. It imports
// nothing of torchd's, so that every package can.
package errkind

import "errors"

var (
	ModelNotFound   = errors.New("model not found")
	VersionNotFound = errors.New("model version not found")
	Loading         = errors.New("model is still loading")
	Conflict        = errors.New("model version already registered")
	DefaultVersion  = errors.New("the default version cannot be removed while others exist")
	BadModel        = errors.New("model cannot be served") // the archive, its settings or its handler
	LoadFailed      = errors.New("model failed to load")   // LibTorch's error, or the warm-up forward's
	StartupTimeout  = errors.New("workers did not start within startup_timeout")
	BadInput        = errors.New("bad request") // the client's input
	TooLarge        = errors.New("request too large")
	Unsupported     = errors.New("not supported by the model") // e.g. an explanation its handler cannot give
	QueueFull       = errors.New("queue full")
	NoWorker        = errors.New("no worker")
	Unregistered    = errors.New("model was unregistered")
	Deadline        = errors.New("request deadline passed while queued")
	ClientGone      = errors.New("client disconnected while queued")
	Inference       = errors.New("inference failed")     // the handler or the model
	ControlOff      = errors.New("model control is off") // load and unload need explicit model control
)

// All lists every kind, for the protocols' tables to be checked against.
var All = []error{ModelNotFound, VersionNotFound, Loading, Conflict, DefaultVersion,
	BadModel, LoadFailed, StartupTimeout, BadInput, TooLarge, Unsupported,
	QueueFull, NoWorker, Unregistered, Deadline, ClientGone, Inference, ControlOff}
