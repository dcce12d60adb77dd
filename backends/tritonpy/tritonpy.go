// Package tritonpy is Triton's Python backend (core.Runtime): a model.py whose
// TritonPythonModel runs in handler processes (package handlerproc: TorchServe's worker, its
// supervision, timeouts and memory limits), through torchd's adapter and its own
// triton_python_backend_utils (python/). Run sends each sample as one Triton request, a
// batch as one execute call, and reads each response back in the config's output order. It
// knows the wire format to the adapter; handlerproc knows the processes; core knows neither.
package tritonpy

import (
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/archive/triton"
	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/errkind"
	"github.com/torchd/torchd/handlerproc"
	"github.com/torchd/torchd/handlers"
)

// Name is the runtime's name in configs and describe.
const Name = triton.RuntimePython

//go:embed python/*.py
var pythonFiles embed.FS

// adapterHandler is the adapter as TorchServe's worker names a handler.
const adapterHandler = "torchd_triton_adapter:handle"

// Backend loads Triton Python backend models. Its zero value runs python3 from the PATH.
type Backend struct {
	// Python is the handler runtime's interpreter ("": python3; handlerproc.Off: none runs).
	Python string
	// MemoryLimit bounds each process's resident memory, in bytes; 0: none.
	MemoryLimit int64
	// StartApart starts every process with its own interpreter, not from the fork server.
	StartApart bool
}

var (
	_ core.Runtime         = (*Backend)(nil)
	_ core.Model           = (*Model)(nil)
	_ core.Signed          = (*Model)(nil)
	_ core.ProcessScaler   = (*Model)(nil)
	_ core.Interrupter     = (*Model)(nil)
	_ core.LogLimiter      = (*Model)(nil)
	_ core.ProcessReporter = (*Model)(nil)
	_ core.ThreadCarrier   = (*Model)(nil)
)

// Name is "python_backend".
func (*Backend) Name() string { return Name }

// Accepts the models whose config names the Python backend.
func (*Backend) Accepts(am *archive.Model) bool { return am.Config.Runtime == Name }

// Load writes the adapter and its arguments to a private directory and starts the model's
// processes, each of which imports model.py and runs initialize. The repository is only read.
func (b *Backend) Load(req core.LoadRequest) (core.Model, error) {
	am, s := req.Archive, req.Settings
	if b.Python == handlerproc.Off {
		return nil, fmt.Errorf("backend python runs model.py in a handler process, and handler processes are off (python = %s)", handlerproc.Off)
	}
	cfg, ok := am.Config.RuntimeOptions[triton.OptionModelConfig]
	if !ok {
		return nil, errors.New("the Python backend serves models of a Triton repository (config.pbtxt with backend: \"python\")")
	}
	versionDir, err := filepath.Abs(am.Dir) // absolute: the processes run in the model's directory
	if err != nil {
		return nil, err
	}
	m := &Model{am: am}
	for _, in := range am.Config.Inputs {
		m.ins = append(m.ins, in.Name)
	}
	for _, out := range am.Config.Outputs {
		m.outs = append(m.outs, out.Name)
	}
	dir, err := os.MkdirTemp("", "torchd-tritonpy-")
	if err != nil {
		return nil, fmt.Errorf("cannot make the adapter's directory: %v", pathErr(err))
	}
	m.dir = dir
	if err := writeAdapter(dir, req, versionDir, cfg); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	pm, err := handlerproc.Start(handlerproc.Config{
		Python: cmpStr(b.Python, "python3"), ModelName: req.Name, ModelDir: filepath.Dir(versionDir), Handler: adapterHandler,
		BatchSize: s.BatchSize, Device: s.Device, Processes: s.MinWorkers,
		StartTimeout: s.StartupTimeout, ResponseTimeout: s.ResponseTimeout, MemoryLimit: b.MemoryLimit, Log: req.Log,
		StartApart: b.StartApart,
		Env: []string{
			// The adapter first, then the version's directory, where model.py's own modules are.
			"PYTHONPATH=" + strings.Join(nonEmpty(dir, versionDir, os.Getenv("PYTHONPATH")), string(os.PathListSeparator)),
			"TORCHD_TRITON_ARGS=" + filepath.Join(dir, "args.json"),
		},
	})
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("%s: %w", am.SerializedFile, err)
	}
	m.pm = pm
	return m, nil
}

// writeAdapter writes the adapter, triton_python_backend_utils and the arguments initialize
// gets into dir.
func writeAdapter(dir string, req core.LoadRequest, versionDir, modelConfig string) error {
	files, _ := pythonFiles.ReadDir("python")
	for _, f := range files {
		b, _ := pythonFiles.ReadFile("python/" + f.Name())
		if err := os.WriteFile(filepath.Join(dir, f.Name()), b, 0o600); err != nil {
			return fmt.Errorf("cannot write the adapter: %v", pathErr(err))
		}
	}
	// KIND_GPU: the instance's kind and device id, as Triton tells model.py where to run.
	kind, device := "CPU", "0"
	if d, ok := strings.CutPrefix(req.Settings.Device, "cuda"); ok {
		kind, device = "GPU", cmpStr(strings.TrimPrefix(d, ":"), "0")
	}
	args, err := json.Marshal(map[string]string{
		"model_config": modelConfig, "model_name": req.Name, "model_version": filepath.Base(versionDir),
		"model_repository": filepath.Dir(versionDir), "model_file": filepath.Join(versionDir, req.Archive.SerializedFile), "lock_dir": dir,
		"instance_kind": kind, "device_id": device,
	})
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "args.json"), args, 0o600); err != nil {
		return fmt.Errorf("cannot write the adapter's arguments: %v", pathErr(err))
	}
	return nil
}

// Model is a loaded Python backend model: its handler processes and its config's tensors.
type Model struct {
	am        *archive.Model
	pm        *handlerproc.Model
	dir       string   // the adapter's private directory
	ins, outs []string // the config's names, in the order samples carry them and Run answers
}

var requestSeq atomic.Uint64

// Run sends each sample as one request of one execute call and returns each request's
// outputs in the config's order. A request that model.py failed fails the batch with its
// error: core then runs the batch's requests one by one, so that it fails alone.
func (m *Model) Run(batch []*handlers.Sample, stage *handlers.Stage) ([][]handlers.Tensor, error) {
	return m.RunThreads(batch, stage, 0)
}

// RunThreads is Run on the batch's share of the cores (core.ThreadCarrier): torch in the
// process runs execute on that many intra-op threads, as a handler process's batch does.
func (m *Model) RunThreads(batch []*handlers.Sample, _ *handlers.Stage, threads int) ([][]handlers.Tensor, error) {
	reqs := make([]handlerproc.Request, len(batch))
	for i, s := range batch {
		id := strconv.FormatUint(requestSeq.Add(1), 36)
		body, err := encodeRequest(id, m.ins, s.Tensors, m.outs)
		if err != nil {
			return nil, handlers.BadInput("%s", err)
		}
		reqs[i] = handlerproc.Request{ID: id, Params: []handlerproc.Param{{Name: "body", ContentType: "application/octet-stream", Value: body}}}
	}
	pr, err := m.pm.PredictThreads(reqs, threads)
	if err != nil {
		// A process lost the batch (a crash, the response timeout): not retried request by
		// request, which would run the culprit again.
		return nil, handlerproc.LostBatch(err)
	}
	if pr.Code != 200 {
		// The adapter answers every request itself; the worker's own failure is the batch's.
		return nil, handlers.Failed("the Python backend's adapter failed: %s", pr.Message)
	}
	byID := make(map[string]*handlerproc.Reply, len(pr.Replies))
	for i := range pr.Replies {
		byID[pr.Replies[i].ID] = &pr.Replies[i]
	}
	out := make([][]handlers.Tensor, len(batch))
	for i := range batch {
		rep := byID[reqs[i].ID]
		if rep == nil {
			return nil, handlers.Failed("the Python backend gave no answer for a request of its batch")
		}
		ts, err := decodeReply(rep.Body)
		if err != nil {
			return nil, requestError(err)
		}
		if out[i], err = m.ordered(ts); err != nil {
			return nil, handlers.Failed("%s", err)
		}
	}
	return out, nil
}

// ordered puts a response's tensors in the config's output order, each of its declared type.
func (m *Model) ordered(ts []handlers.Tensor) ([]handlers.Tensor, error) {
	out := make([]handlers.Tensor, len(m.outs))
	for i, name := range m.outs {
		j := -1
		for k := range ts {
			if ts[k].Name == name {
				j = k
				break
			}
		}
		if j < 0 {
			var got []string
			for _, t := range ts {
				got = append(got, t.Name)
			}
			return nil, fmt.Errorf("model.py's response has no output %q (it has %s)", name, cmpStr(strings.Join(got, ", "), "none"))
		}
		if want := m.am.Config.Outputs[i].DType; ts[j].DType.String() != want {
			return nil, fmt.Errorf("model.py's output %q is %s, the config declares %s", name, ts[j].DType, want)
		}
		out[i] = ts[j]
	}
	return out, nil
}

// requestError is a request's error as the client sees it: model.py's message, of the kind
// its TritonError's code is (INVALID_ARG the client's, UNSUPPORTED the model's refusal, else
// the model's failure), with the HTTP status Triton answers that code with as its own code.
func requestError(err error) error {
	var re *replyError
	if !errors.As(err, &re) {
		return handlers.Failed("the Python backend's reply: %s", err)
	}
	switch re.Code {
	case "INVALID_ARG":
		return &handlers.Error{Kind: errkind.BadInput, Code: 400, Msg: re.Msg}
	case "UNAVAILABLE":
		return &handlers.Error{Kind: errkind.Inference, Code: 503, Msg: re.Msg}
	case "NOT_FOUND":
		return &handlers.Error{Kind: errkind.BadInput, Code: 404, Msg: re.Msg}
	case "UNSUPPORTED":
		return &handlers.Error{Kind: errkind.Unsupported, Code: 501, Msg: re.Msg}
	}
	return handlers.Failed("%s", re.Msg)
}

// Kind is "python_backend".
func (*Model) Kind() string { return Name }

// Device is where the processes were told to run.
func (m *Model) Device() string { return m.pm.Device() }

// Signature is the config's inputs and outputs: model.py declares none of its own.
func (m *Model) Signature() (ins, outs []archive.TensorSpec) {
	return m.am.Config.Inputs, m.am.Config.Outputs
}

// SetProcesses runs a process per worker, as handler processes do (core.ProcessScaler).
func (m *Model) SetProcesses(n int) error { return m.pm.SetProcesses(n) }

// Interrupt cuts the running batches short, for a stop within shutdown_timeout.
func (m *Model) Interrupt() { m.pm.Interrupt() }

// DroppedLogLines counts model.py's output lines dropped over the rate limit.
func (m *Model) DroppedLogLines() int64 { return m.pm.DroppedLogLines() }

// Processes are the live processes and their memory.
func (m *Model) Processes() []core.ProcessInfo { return m.pm.Processes() }

// Close stops the processes and removes the adapter's directory. handlerproc kills a process
// outright, so finalize runs only where a worker exits by itself.
func (m *Model) Close() error {
	err := m.pm.Close()
	os.RemoveAll(m.dir)
	return err
}

// pathErr is an *os.PathError's reason without Go's wrapping.
func pathErr(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %v", pe.Path, pe.Err)
	}
	return err
}

func cmpStr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func nonEmpty(ss ...string) []string {
	var out []string
	for _, s := range ss {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}
