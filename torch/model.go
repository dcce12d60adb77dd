package torch

// Model is what a worker runs a batch on: a TorchScript Module or an AOTInductor Package.
// Forward takes and returns values as Module.Run does.
type Model interface {
	Forward(args ...any) (any, error)
	Device() string
	Close() error
}

var (
	_ Model = (*Module)(nil)
	_ Model = (*Package)(nil)
)
