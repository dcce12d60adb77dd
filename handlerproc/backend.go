package handlerproc

import (
	"fmt"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/core"
)

// Off as Backend.Python refuses archives whose handler is Python.
const Off = "off"

// Backend is the runtime of archives whose handler is Python (core.Runtime): it starts the
// processes that run the handler with TorchServe's worker, one per worker the pool starts with
// (a worker beyond them waits for a free one).
type Backend struct {
	// Python is the interpreter ("": python3 on the PATH; Off: no handler process runs).
	Python string
	// InstallPyDeps installs an archive's requirements.txt for its processes, as TorchServe's
	// install_py_dep_per_model (pydeps.go).
	InstallPyDeps bool
	// MemoryLimit bounds each process's resident memory, in bytes; 0: none.
	MemoryLimit int64
	// MetricsConfig is the metrics.yaml handlers' context.metrics knows (TorchServe's
	// metrics_config); "": TorchServe's default.
	MetricsConfig string
	// OnMetric takes each metric a model's handler emits (Config.OnMetric); nil: none kept.
	OnMetric func(model string, m Metric)
	// StartApart starts every process with its own interpreter, never from the fork server.
	StartApart bool
}

var (
	_ core.Runtime          = (*Backend)(nil)
	_ core.Model            = (*Model)(nil)
	_ core.ProcessScaler    = (*Model)(nil)
	_ core.Interrupter      = (*Model)(nil)
	_ core.LogLimiter       = (*Model)(nil)
	_ core.ProcessReporter  = (*Model)(nil)
	_ core.HandlerExplainer = (*Model)(nil)
	_ core.ThreadCarrier    = (*Model)(nil)
)

// Name is what describe shows as the model's runtime.
func (*Backend) Name() string { return "python" }

// Accepts the archives whose handler is a Python handler.
func (*Backend) Accepts(am *archive.Model) bool { return am.Config.Handler == archive.HandlerPython }

// Load starts the handler's processes. With no workers, none starts until workers are added
// (Scale), as in TorchServe.
func (b *Backend) Load(req core.LoadRequest) (core.Model, error) {
	am, s := req.Archive, req.Settings
	if b.Python == Off {
		return nil, fmt.Errorf("its handler %q is Python, and handler processes are off (python = %s)", am.PythonHandler, Off)
	}
	python := cmpStr(b.Python, "python3")
	env, skipped, err := b.pythonDeps(req, python)
	if err != nil {
		return nil, fmt.Errorf("handler %q: %w", am.PythonHandler, err)
	}
	m, err := Start(Config{
		Python: python, ModelName: req.Name, ModelDir: am.Dir, Handler: am.PythonHandler,
		BatchSize: s.BatchSize, Device: s.Device, Processes: s.MinWorkers, Env: env,
		StartTimeout: s.StartupTimeout, ResponseTimeout: s.ResponseTimeout, MemoryLimit: b.MemoryLimit, Log: req.Log,
		MetricsConfig: b.MetricsConfig, OnMetric: b.onMetric(req.Name),
		// An archive's installed requirements may hold other versions of what the fork
		// server imported: its processes start apart.
		StartApart: b.StartApart || env != nil,
	})
	if err != nil {
		return nil, fmt.Errorf("handler %q: %w%s", am.PythonHandler, err, skipped)
	}
	return m, nil
}

// Processes are the live handler processes with their resident memory.
func (m *Model) Processes() []core.ProcessInfo {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]core.ProcessInfo, 0, len(m.live))
	for p := range m.live {
		pid := p.pid
		out = append(out, core.ProcessInfo{PID: pid, RSSBytes: rss(pid)})
	}
	return out
}

// onMetric is OnMetric for one model's processes.
func (b *Backend) onMetric(model string) func(Metric) {
	if b.OnMetric == nil {
		return nil
	}
	return func(m Metric) { b.OnMetric(model, m) }
}
