package handlerproc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Runtime is the Python that runs handlers: an interpreter that can import TorchServe's
// `ts` package (PyPI torchserve), whose worker torchd drives unchanged.
type Runtime struct {
	Python string // the interpreter
	tsDir  string // the ts package's directory: its metrics config lives there
}

var (
	runtimesMu sync.Mutex
	runtimes   = map[string]*Runtime{}
)

// FindRuntime checks once per interpreter that it can import ts and what its worker imports
// at start (PyYAML, for its metrics config): a Python that lacks one is refused here, with
// the reason, not at every registration.
func FindRuntime(python string) (*Runtime, error) {
	runtimesMu.Lock()
	defer runtimesMu.Unlock()
	if rt := runtimes[python]; rt != nil {
		return rt, nil
	}
	if _, err := exec.LookPath(python); err != nil {
		return nil, fmt.Errorf("the handler runtime's Python %q is not an executable (set the server's python setting; in a container, use the image with the handler runtime: Dockerfile.cpu's handlers target)", python)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := runTracked(exec.CommandContext(ctx, python, "-c", "import os, yaml, ts; print(os.path.dirname(ts.__file__))"))
	if err != nil {
		return nil, fmt.Errorf("the handler runtime's Python %q cannot import TorchServe's ts package and the PyYAML it needs: install them with `pip install torchserve==0.12.0 pyyaml` (make handler-runtime does it for the project's venv): %s",
			python, lastLine(out))
	}
	rt := &Runtime{Python: python, tsDir: strings.TrimSpace(string(out))}
	runtimes[python] = rt
	return rt, nil
}

// errExited is a handler process that went away while torchd waited on it.
var errExited = errors.New("the handler process exited")

// process is one TorchServe worker (ts/model_service_worker.py) serving one model over a
// Unix socket, which only torchd connects to.
type process struct {
	name string // the model's name, in log lines
	pid  int    // its supervisor's, the root of its tree
	dir  string // holds the socket
	conn net.Conn
	r    *bufio.Reader
	done chan struct{} // closed when the process has exited
	// How it exited, once done is closed: its status, or why that is not known.
	status syscall.WaitStatus
	err    error
	log    *slog.Logger
	// stdin is the supervisor's stdin: closing it stops the tree, as torchd's death does.
	stdin *os.File
	out   *os.File // the output's read end
	// overLimit is the RSS at which the memory watchdog killed it; 0: it did not.
	overLimit atomic.Int64
	onMetric  func(Metric) // the handler's metrics, as it emits them; nil: none kept
}

// startOptions is what a worker process is started and loaded with.
type startOptions struct {
	rt       *Runtime
	load     Load
	env      []string      // added to torchd's environment
	timeout  time.Duration // for the start and the load together
	log      *slog.Logger
	logLines int // the most output lines kept for an error message
	limit    *logLimiter
	// metricsConfig is the metrics.yaml the worker's context.metrics knows (TorchServe's
	// metrics_config); "": ts's default.
	metricsConfig string
	onMetric      func(Metric)
	// apart starts it with its own interpreter, not forked from the runtime's fork server.
	apart bool
}

// SocketRoot is the directory that holds handler processes' socket directories: TMPDIR,
// unless its path is so long that a socket's would pass AF_UNIX's 108 bytes (the worker
// would fail with "AF_UNIX path too long"); /tmp then.
func SocketRoot() string {
	dir := os.TempDir()
	// The longest name startProcess makes: a 7-digit pid, MkdirTemp's 10-digit suffix.
	if len(dir)+len("/torchd-4194304-handler-4294967295/.ts.sock.0") < 108 {
		return dir
	}
	return "/tmp"
}

// startProcess starts a worker under its supervisor (supervisor.go), forked from the
// runtime's fork server where it can be (forkserver.go), connects to it and loads the model.
// On an error nothing is left running.
func startProcess(o startOptions) (_ *process, err error) {
	// The pid in the name lets the next torchd remove what a killed one left
	// (daemon's SweepTemp).
	dir, err := os.MkdirTemp(SocketRoot(), fmt.Sprintf("torchd-%d-handler-", os.Getpid()))
	if err != nil {
		return nil, fmt.Errorf("cannot make the handler process's socket directory: %w", cleanErr(err))
	}
	sock := filepath.Join(dir, ".ts.sock.0") // the worker parses the suffix after the last dot as a port
	worker := filepath.Join(dir, "worker.py")
	if err := os.WriteFile(worker, []byte(workerScript), 0o600); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("cannot write the handler process's script: %w", cleanErr(err))
	}
	argv := []string{worker, filepath.Join(o.rt.tsDir, "model_service_worker.py"),
		"--sock-type", "unix", "--sock-name", sock, "--metrics-config", cmpStr(o.metricsConfig, filepath.Join(o.rt.tsDir, "configs", "metrics.yaml"))}
	// As TorchServe's frontend: the model's directory first on the path, so that its
	// handler and model files import.
	env := append(os.Environ(), "PYTHONPATH="+joinPath(o.load.ModelPath, os.Getenv("PYTHONPATH")))
	env = append(env, o.env...)
	env = withAllocDefaults(env)
	env = append(env, handlerMark())
	// The output is a pipe of torchd's own, not exec's: Wait then does not wait for its last
	// writer, which may be a process that outlived the worker.
	outR, outW, err := os.Pipe()
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("cannot start the handler process: %w", cleanErr(err))
	}
	// The supervisor's stdin: only torchd holds its write end, so it closes when torchd dies.
	inR, inW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		os.RemoveAll(dir)
		return nil, fmt.Errorf("cannot start the handler process: %w", cleanErr(err))
	}
	pid, wait, err := o.spawn(dir, argv, env, inR, outW)
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		os.RemoveAll(dir)
		return nil, fmt.Errorf("cannot start the handler process %s: %w", o.rt.Python, cleanErr(err))
	}
	p := &process{name: o.load.ModelName, pid: pid, dir: dir, done: make(chan struct{}), log: o.log, stdin: inW, out: outR, onMetric: o.onMetric}
	tail := &lineTail{max: max(o.logLines, 20)}
	logged := make(chan struct{})
	go p.copyLog(outR, tail, o.limit, logged)
	go func() {
		status, err := wait()
		// The supervisor kills the tree before it exits, so the output ends with it; the
		// last lines are read before done, for the error that quotes them.
		select {
		case <-logged:
		case <-time.After(2 * time.Second):
		}
		p.status, p.err = status, err
		close(p.done)
	}()
	defer func() {
		if err != nil {
			p.kill()
			if msg := tail.pythonError(); msg != "" {
				err = fmt.Errorf("%w: %s", err, msg)
			}
		}
	}()
	deadline := time.Now().Add(o.timeout)
	if err := p.connect(sock, deadline); err != nil {
		return nil, err
	}
	p.conn.SetDeadline(deadline)
	if _, err := p.conn.Write(encodeLoad(o.load)); err != nil {
		return nil, p.ioErr(err, "loading the model")
	}
	code, msg, err := readLoadReply(p.r)
	if err != nil {
		return nil, p.ioErr(err, "loading the model")
	}
	if code != 200 {
		return nil, fmt.Errorf("the handler failed to load the model (%d %s)", code, msg)
	}
	p.conn.SetDeadline(time.Time{})
	return p, nil
}

// spawn starts the supervised worker (argv after the interpreter) with stdin and out, forked
// from the fork server unless o.apart or it cannot be, else under a supervisor of its own
// whose script goes into dir. wait returns how the supervisor exited.
func (o startOptions) spawn(dir string, argv, env []string, stdin, out *os.File) (pid int, wait func() (syscall.WaitStatus, error), err error) {
	if !o.apart {
		fs, why := o.forkServer()
		f, err := (*forked)(nil), error(nil)
		if fs != nil {
			f, err = fs.fork(argv, o.load.ModelPath, env, stdin, out)
			if errors.Is(err, errForkServerRetired) {
				// It was told to exit as this process was asked: the next one forks it.
				if fs, why = o.forkServer(); fs != nil {
					f, err = fs.fork(argv, o.load.ModelPath, env, stdin, out)
				}
			}
		}
		if fs != nil {
			if err == nil {
				return f.pid, func() (syscall.WaitStatus, error) { <-f.exited; return f.status, f.err }, nil
			}
			o.log.Warn("the fork server did not start a handler process: it starts apart", "model", o.load.ModelName, "err", err)
		} else if why != "" {
			o.log.Info("the handler process starts apart, not forked from the fork server", "model", o.load.ModelName, "reason", why)
		}
	}
	cmd, err := supervised(o.rt.Python, dir, append([]string{o.rt.Python, "-u"}, argv...)...)
	if err != nil {
		return 0, nil, err
	}
	cmd.Dir = o.load.ModelPath
	cmd.Env = env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, out, out
	if err := startTracked(cmd, true); err != nil {
		return 0, nil, err
	}
	return cmd.Process.Pid, func() (syscall.WaitStatus, error) {
		err := cmd.Wait()
		forget(cmd.Process.Pid)
		if cmd.ProcessState != nil {
			if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok {
				return ws, nil
			}
		}
		return 0, err
	}, nil
}

// forkServer is the runtime's fork server if this process can be forked from it; else why
// not ("" when there is no fork server at all, which its start logged).
func (o startOptions) forkServer() (*forkServer, string) {
	env := withAllocDefaults(os.Environ())
	fs, err := forkServerFor(o.rt, append(env, handlerMark()), o.log)
	if err != nil {
		return nil, ""
	}
	dirs := []string{o.load.ModelPath}
	own := strings.Split(os.Getenv("PYTHONPATH"), string(os.PathListSeparator))
	for _, kv := range o.env {
		if v, ok := strings.CutPrefix(kv, "PYTHONPATH="); ok {
			for _, d := range strings.Split(v, string(os.PathListSeparator)) {
				if d != "" && !slices.Contains(own, d) {
					dirs = append(dirs, d)
				}
			}
		}
	}
	if why := fs.forkable(o.env, dirs); why != "" {
		return nil, why
	}
	return fs, ""
}

// connect waits for the worker's socket: importing torch takes seconds.
func (p *process) connect(sock string, deadline time.Time) error {
	for wait := 20 * time.Millisecond; ; wait = min(wait*2, 250*time.Millisecond) {
		c, err := net.DialTimeout("unix", sock, time.Until(deadline))
		if err == nil {
			p.conn, p.r = c, bufio.NewReaderSize(c, 64<<10)
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("%w before it took a connection (%v)", errExited, p.exitText())
		case <-time.After(wait):
		}
		if time.Now().After(deadline) {
			return errors.New("the handler process did not start listening in time")
		}
	}
}

// predict sends a batch and reads its replies. A streaming handler sends intermediate
// replies (header ts_stream_next=true) before the last one: each goes to its request's Part
// where it has one, else their bodies are joined in order.
func (p *process) predict(batch []Request, timeout time.Duration) (PredictReply, error) {
	var streamed map[string]func(Reply)
	for _, r := range batch {
		if r.Part != nil {
			if streamed == nil {
				streamed = map[string]func(Reply){}
			}
			streamed[r.ID] = r.Part
		}
	}
	if timeout > 0 {
		p.conn.SetDeadline(time.Now().Add(timeout))
		defer p.conn.SetDeadline(time.Time{})
	}
	if _, err := p.conn.Write(encodePredict(batch)); err != nil {
		return PredictReply{}, p.ioErr(err, "sending a batch")
	}
	var final PredictReply
	parts := map[string]*Reply{}
	for {
		pr, err := readPredictReply(p.r)
		if err != nil {
			return PredictReply{}, p.ioErr(err, "waiting for the batch's answers")
		}
		more := false
		for i := range pr.Replies {
			rep := &pr.Replies[i]
			if rep.Headers["ts_stream_next"] == "true" && pr.Code == 200 {
				if part := streamed[rep.ID]; part != nil {
					more = true
					delete(rep.Headers, "ts_stream_next")
					if !validStatus(rep.Status) { // the first part's status is the answer's
						p.log.Warn("handler answered an invalid HTTP status: answered 500", "model", p.name, "status", rep.Status)
						rep.Status = 500
					}
					part(*rep)
					continue
				}
			}
			if prev := parts[rep.ID]; prev != nil {
				prev.Body = append(prev.Body, rep.Body...)
				prev.Headers, prev.Status, prev.Reason, prev.ContentType = rep.Headers, rep.Status, rep.Reason, cmpStr(rep.ContentType, prev.ContentType)
			} else {
				parts[rep.ID] = rep
			}
			if rep.Headers["ts_stream_next"] == "true" {
				more = true
			}
		}
		final.Code, final.Message = pr.Code, pr.Message
		if !more || pr.Code != 200 {
			break
		}
	}
	for _, r := range batch {
		if rep := parts[r.ID]; rep != nil {
			delete(rep.Headers, "ts_stream_next")
			final.Replies = append(final.Replies, *rep)
		}
	}
	return final, nil
}

// ioErr names what failed talking to the worker: its exit, a timeout, or a broken reply.
func (p *process) ioErr(err error, doing string) error {
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		return fmt.Errorf("%w: the handler did not answer in time while %s", errTimeout, doing)
	case errors.Is(err, errProtocol):
		return fmt.Errorf("%v while %s", err, doing)
	}
	select {
	case <-p.done:
		return fmt.Errorf("%w while %s (%v)", errExited, doing, p.exitText())
	case <-time.After(5 * time.Second):
		return fmt.Errorf("the handler process closed its connection while %s", doing)
	}
}

var errTimeout = errors.New("handler timed out")

func (p *process) exitText() string {
	select {
	case <-p.done:
	default:
		return "still running"
	}
	switch {
	case p.err != nil:
		return cleanErr(p.err).Error()
	case p.status.Signaled():
		return "killed by signal " + p.status.Signal().String()
	}
	return fmt.Sprintf("exit status %d", p.status.ExitStatus())
}

// kill stops the worker and every process it started, and removes its socket directory.
func (p *process) kill() {
	if p.conn != nil {
		p.conn.Close()
	}
	p.stop()
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		// The supervisor did not stop the tree (it was killed, or is stuck): kill what can
		// still be found from it.
		killTree(p.pid)
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
			p.log.Warn("handler process did not exit after SIGKILL", "model", p.name, "pid", p.pid)
		}
	}
	p.out.Close() // ends the log's copy should a process that escaped the tree still hold it
	os.RemoveAll(p.dir)
}

// stop asks the supervisor to kill the worker's tree, and returns at once.
func (p *process) stop() {
	p.stdin.Close()
	select {
	case <-p.done: // its pid may be another process's now
	default:
		syscall.Kill(p.pid, syscall.SIGTERM)
	}
}

// lineTail keeps the last lines a process printed, for the error that names why it failed.
type lineTail struct {
	mu    sync.Mutex
	max   int
	lines []string
}

func (t *lineTail) add(s string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lines = append(t.lines, s)
	if len(t.lines) > t.max {
		t.lines = t.lines[len(t.lines)-t.max:]
	}
}

// pythonError is the last Python exception line the process printed (e.g. "SyntaxError:
// invalid syntax"), or "".
func (t *lineTail) pythonError() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := len(t.lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(t.lines[i])
		if name, _, ok := strings.Cut(l, ": "); ok && !strings.ContainsAny(name, " []") &&
			(strings.HasSuffix(name, "Error") || strings.HasSuffix(name, "Exception")) {
			return l
		}
	}
	return ""
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}

func joinPath(a, b string) string {
	if b == "" {
		return a
	}
	return a + string(os.PathListSeparator) + b
}

func cmpStr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// cleanErr drops the syscall wrapper from an os error: users see what failed, not errno names.
func cleanErr(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s %s: %s", pe.Op, pe.Path, describeErrno(pe.Err))
	}
	var se *os.SyscallError
	if errors.As(err, &se) {
		return errors.New(describeErrno(se.Err))
	}
	return err
}

func describeErrno(err error) string {
	var en syscall.Errno
	if errors.As(err, &en) {
		return en.Error()
	}
	return err.Error()
}
