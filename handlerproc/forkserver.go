package handlerproc

import (
	"bufio"
	_ "embed"
	"encoding/json"
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

// A handler process started apart imports torch and TorchServe's worker itself: seconds of
// CPU, and hundreds of MiB of memory of its own (the interpreter's objects, the libraries'
// relocated data) that every process repeats. A fork server per runtime (forkserver.py)
// imports them once and forks each process after the imports, so those pages stay shared
// until a process writes them: two resnet18 workers took 451 MiB PSS forked against 935 MiB
// started apart (bench/handlerproc/forkshare.py). The fork server runs no torch op, so a
// forked process starts no OpenMP pool it inherited; it sets its thread count itself.
//
// A forked process is supervised as one started apart: the fork server's child forks the
// worker and then execs supervisor.py, the subreaper of the worker's tree (a fresh
// interpreter, so it holds none of the warm pages), and torchd gets its pid, its output (the
// pipes torchd made, passed over the socket) and its exit status (the fork server reaps it
// and says how it exited). The fork server dies with torchd, and the supervisors
// with it; when it dies alone, torchd kills what is left of its processes' trees, those
// processes fail as after a crash, and the next start makes a new fork server.
//
// A process whose environment the fork server cannot give it is started apart: an archive's
// installed requirements (its modules could differ from those imported already), variables
// read when a library loads (OMP_*, MALLOC_*, ...), and a model directory with a module of the
// name of one imported already.

//go:embed forkserver.py
var forkServerScript string

// forkServer is the fork server of one runtime.
type forkServer struct {
	pid     int
	conn    *net.UnixConn
	dir     string
	modules map[string]bool // the top-level modules it imported
	log     *slog.Logger

	sendMu  sync.Mutex // one request on the socket at a time
	mu      sync.Mutex
	nextID  int
	waiting map[int]chan forkReply
	procs   map[int]*forked // its live processes, by pid
	dead    bool
	exited  chan struct{} // closed once it has been waited for

	// Retirement (RetireForkServers): it exits once no fork has been asked of it for a while.
	inflight int         // forks asked and not answered
	idle     *time.Timer // retires it when it fires
	retired  bool        // told to exit: its processes are left to this process
}

// forked is a process the fork server started, until it has exited.
type forked struct {
	pid    int
	exited chan struct{}
	status syscall.WaitStatus
	err    error // why its status is unknown (the fork server exited before it)
}

type forkMsg struct {
	Op      string   `json:"op"`
	ID      int      `json:"id,omitempty"`
	PID     int      `json:"pid,omitempty"`
	Status  int      `json:"status,omitempty"`
	Error   string   `json:"error,omitempty"`
	Modules []string `json:"modules,omitempty"`
	Threads int      `json:"threads,omitempty"`
	// A request: the worker's argv after the interpreter, its directory and environment.
	Argv []string `json:"argv,omitempty"`
	Cwd  string   `json:"cwd,omitempty"`
	Env  []string `json:"env,omitempty"`
}

type forkReply struct {
	f   *forked
	err error
}

var (
	forkMu      sync.Mutex
	forkServers = map[*Runtime]*forkServer{}
	forkFailed  = map[*Runtime]error{}  // a fork server that could not start is not tried again
	forkDirs    = map[*Runtime]string{} // the scripts of a runtime's fork servers
)

// errForkServerExited is a forked process's end when the fork server died before it.
var errForkServerExited = errors.New("its fork server exited")

// errForkServerRetired is a fork asked of a fork server that was just told to exit: the
// caller asks the next one.
var errForkServerRetired = errors.New("the fork server exited as it had forked nothing for a while")

// forkLinger is how long a fork server stays after its last fork (RetireForkServers); 0 keeps
// it while this process runs.
var forkLinger atomic.Int64

// RetireForkServers makes a runtime's fork server exit once no process has been forked from
// it for linger (0, the default: it stays), taking its own resident memory off this process's
// tree: RSS counts the imports' pages it shares with its processes once in it and once in
// each of them. The next start (a restart, a scale-up) starts a new one, which pays the
// imports again. Its processes live on as this process's children, which needs this process
// to be their subreaper (ReapOrphans): without it, the fork server stays.
func RetireForkServers(linger time.Duration) { forkLinger.Store(int64(max(linger, 0))) }

// forkServerFor is the runtime's fork server, started on first use (it imports torch:
// seconds), or the reason there is none.
func forkServerFor(rt *Runtime, env []string, log *slog.Logger) (*forkServer, error) {
	forkMu.Lock()
	defer forkMu.Unlock()
	if fs := forkServers[rt]; fs != nil {
		fs.mu.Lock()
		dead := fs.dead || fs.retired
		fs.mu.Unlock()
		if !dead {
			return fs, nil
		}
		delete(forkServers, rt)
	}
	if err := forkFailed[rt]; err != nil {
		return nil, err
	}
	fs, err := startForkServer(rt, env, log)
	if err != nil {
		forkFailed[rt] = err
		log.Warn("the handler runtime's fork server did not start: handler processes start apart", "python", rt.Python, "err", err)
		return nil, err
	}
	forkServers[rt] = fs
	return fs, nil
}

// startForkServer starts the fork server with env (torchd's own, with the processes'
// defaults) and waits until it has imported what it preloads.
// Called with forkMu held.
func startForkServer(rt *Runtime, env []string, log *slog.Logger) (_ *forkServer, err error) {
	// One directory per runtime for this process's life, not per fork server: a process
	// forked just before its fork server exits may not have opened supervisor.py yet.
	dir := forkDirs[rt]
	if _, serr := os.Stat(filepath.Join(dir, "supervisor.py")); dir == "" || serr != nil {
		if dir, err = os.MkdirTemp("", fmt.Sprintf("torchd-%d-handler-fork-", os.Getpid())); err != nil {
			return nil, cleanErr(err)
		}
		for name, text := range map[string]string{"forkserver.py": forkServerScript, "supervisor.py": supervisorScript} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
				os.RemoveAll(dir)
				return nil, cleanErr(err)
			}
		}
		forkDirs[rt] = dir
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
			delete(forkDirs, rt)
		}
	}()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, cleanErr(os.NewSyscallError("socketpair", err))
	}
	mine, theirs := os.NewFile(uintptr(fds[0]), "fork server"), os.NewFile(uintptr(fds[1]), "fork server")
	defer theirs.Close()
	c, err := net.FileConn(mine)
	mine.Close()
	if err != nil {
		return nil, cleanErr(err)
	}
	conn := c.(*net.UnixConn)
	cmd := exec.Command(rt.Python, "-u", filepath.Join(dir, "forkserver.py"))
	cmd.Dir = dir
	cmd.Env = env
	cmd.ExtraFiles = []*os.File{theirs} // fd 3
	// Its own process group, away from the terminal's signals to torchd; it dies with torchd.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	outR, outW, err := os.Pipe()
	if err != nil {
		conn.Close()
		return nil, cleanErr(err)
	}
	cmd.Stdout, cmd.Stderr = outW, outW
	err = startTracked(cmd, true)
	outW.Close()
	if err != nil {
		conn.Close()
		outR.Close()
		return nil, cleanErr(err)
	}
	fs := &forkServer{pid: cmd.Process.Pid, conn: conn, dir: dir, log: log, waiting: map[int]chan forkReply{}, procs: map[int]*forked{}}
	tail := &lineTail{max: 20}
	outDone := make(chan struct{})
	go func() {
		defer close(outDone)
		defer outR.Close()
		br := bufio.NewReaderSize(outR, 64<<10)
		for {
			line, _, err := readLine(br)
			if err != nil {
				return
			}
			tail.add(line)
			log.Debug("handler fork server", "pid", fs.pid, "line", line)
		}
	}()
	exited := make(chan struct{})
	fs.exited = exited
	go func() {
		cmd.Wait()
		forget(cmd.Process.Pid)
		close(exited)
		conn.Close() // ends read's loop should the socket still be open
	}()
	ready := make(chan error, 1)
	go fs.read(ready, exited)
	select {
	case err := <-ready:
		if err != nil {
			syscall.Kill(fs.pid, syscall.SIGKILL)
			// Its exit can be seen before its last lines are read from the pipe; a child
			// that holds the pipe open bounds the wait.
			select {
			case <-outDone:
			case <-time.After(2 * time.Second):
			}
			if msg := tail.pythonError(); msg != "" && !strings.Contains(err.Error(), msg) {
				err = fmt.Errorf("%w: %s", err, msg)
			}
			return nil, err
		}
	case <-time.After(5 * time.Minute):
		syscall.Kill(fs.pid, syscall.SIGKILL)
		return nil, errors.New("it did not import torch within 5 minutes")
	}
	return fs, nil
}

// read takes the fork server's messages until its socket closes: the first (ready or
// failed) to ready, replies to their requests, exits to their processes.
func (fs *forkServer) read(ready chan<- error, exited <-chan struct{}) {
	buf := make([]byte, 1<<20)
	first := true
	for {
		n, _, _, _, err := fs.conn.ReadMsgUnix(buf, nil)
		var m forkMsg
		if err == nil && n == 0 {
			err = errors.New("closed")
		}
		if err == nil {
			err = json.Unmarshal(buf[:n], &m)
		}
		if err != nil {
			if first {
				// Its last lines, which name the error, are read before it is reported.
				select {
				case <-exited:
				case <-time.After(30 * time.Second):
				}
				ready <- errors.New("it exited as it started")
			}
			fs.died()
			return
		}
		switch m.Op {
		case "ready":
			fs.modules = map[string]bool{}
			for _, name := range m.Modules {
				fs.modules[name] = true
			}
			fs.log.Info("handler fork server ready", "pid", fs.pid, "modules", len(m.Modules), "threads", m.Threads)
			ready <- nil
			first = false
		case "failed":
			ready <- errors.New(m.Error)
			first = false
		case "forked":
			fs.mu.Lock()
			ch := fs.waiting[m.ID]
			delete(fs.waiting, m.ID)
			var f *forked
			if m.Error == "" {
				f = &forked{pid: m.PID, exited: make(chan struct{})}
				fs.procs[m.PID] = f
				// Known to the reaper before it can become this process's child (when the
				// fork server exits), so that it is waited for, not killed as an orphan.
				track(m.PID)
			}
			fs.mu.Unlock()
			if ch != nil {
				if f != nil {
					ch <- forkReply{f: f}
				} else {
					ch <- forkReply{err: errors.New(m.Error)}
				}
			}
		case "exit":
			fs.mu.Lock()
			f := fs.procs[m.PID]
			delete(fs.procs, m.PID)
			fs.mu.Unlock()
			if f != nil {
				forget(m.PID)
				f.status = syscall.WaitStatus(m.Status)
				close(f.exited)
			}
		}
	}
}

// died ends every request of a fork server that exited, and takes over its processes, which
// it left to this process (their subreaper) or to init. A fork server that was retired
// leaves them serving, waited for here. One that died otherwise takes them down: what is
// left of their trees is killed here before their end is told, so that a process is never
// seen gone while its tree runs.
func (fs *forkServer) died() {
	// Its processes are reparented as it exits, before it can be waited for.
	select {
	case <-fs.exited:
	case <-time.After(5 * time.Second):
	}
	fs.mu.Lock()
	fs.dead = true
	retired := fs.retired
	if fs.idle != nil {
		fs.idle.Stop()
	}
	waiting, procs := fs.waiting, fs.procs
	fs.waiting, fs.procs = map[int]chan forkReply{}, map[int]*forked{}
	fs.mu.Unlock()
	fs.conn.Close()
	for _, ch := range waiting {
		ch <- forkReply{err: errForkServerExited}
	}
	if retired {
		fs.log.Info("the handler fork server exited, having forked nothing for a while: its processes serve on, and the next start starts a new one",
			"pid", fs.pid, "processes", len(procs))
	} else if len(procs) > 0 {
		fs.log.Warn("the handler fork server exited: its processes are stopped and restart", "pid", fs.pid, "processes", len(procs))
	}
	for _, f := range procs {
		go func() {
			if !retired {
				killTree(f.pid)
				f.err = errForkServerExited
			}
			ws, err := waitChild(f.pid)
			forget(f.pid)
			if err != nil {
				// Not this process's child (no subreaper): init reaps it.
				waitExit(f.pid, 5*time.Second)
				if f.err == nil {
					f.err = errForkServerExited
				}
			}
			f.status = ws
			close(f.exited)
		}()
	}
}

// waitChild waits for pid, a child of this process, to exit.
func waitChild(pid int) (syscall.WaitStatus, error) {
	for {
		var ws syscall.WaitStatus
		_, err := syscall.Wait4(pid, &ws, 0, nil)
		if err != syscall.EINTR {
			return ws, err
		}
	}
}

// retire tells the fork server to exit when nothing is asked of it and its processes would
// come to this process, their subreaper.
func (fs *forkServer) retire() {
	fs.mu.Lock()
	if fs.dead || fs.retired || fs.inflight > 0 || !subreaping() {
		fs.mu.Unlock()
		return
	}
	fs.retired = true
	fs.mu.Unlock()
	msg, _ := json.Marshal(forkMsg{Op: "exit"})
	fs.sendMu.Lock()
	_, _, err := fs.conn.WriteMsgUnix(msg, nil, nil)
	fs.sendMu.Unlock()
	if err != nil {
		syscall.Kill(fs.pid, syscall.SIGKILL) // it does not read: it exits all the same
	}
}

// waitExit waits up to d for pid to be gone or a zombie.
func waitExit(pid int, d time.Duration) {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return
		}
		if i := strings.LastIndexByte(string(b), ')'); i > 0 && i+2 < len(b) && b[i+2] == 'Z' {
			return
		}
	}
}

// fork starts a worker (argv after the interpreter) in cwd with env, its stdin and output
// the files given; they are the caller's to close.
func (fs *forkServer) fork(argv []string, cwd string, env []string, stdin, out *os.File) (*forked, error) {
	fs.mu.Lock()
	if fs.retired {
		fs.mu.Unlock()
		return nil, errForkServerRetired
	}
	if fs.dead {
		fs.mu.Unlock()
		return nil, errForkServerExited
	}
	fs.nextID++
	id := fs.nextID
	ch := make(chan forkReply, 1)
	fs.waiting[id] = ch
	fs.inflight++
	if fs.idle != nil {
		fs.idle.Stop()
	}
	fs.mu.Unlock()
	defer func() {
		fs.mu.Lock()
		if fs.inflight--; fs.inflight == 0 {
			if linger := time.Duration(forkLinger.Load()); linger > 0 && fs.idle == nil {
				fs.idle = time.AfterFunc(linger, fs.retire)
			} else if linger > 0 {
				fs.idle.Reset(linger)
			}
		}
		fs.mu.Unlock()
	}()
	msg, err := json.Marshal(forkMsg{Op: "fork", ID: id, Argv: argv, Cwd: cwd, Env: env})
	if err != nil {
		return nil, err
	}
	fs.sendMu.Lock()
	_, _, err = fs.conn.WriteMsgUnix(msg, syscall.UnixRights(int(stdin.Fd()), int(out.Fd())), nil)
	fs.sendMu.Unlock()
	if err != nil {
		fs.mu.Lock()
		delete(fs.waiting, id)
		fs.mu.Unlock()
		return nil, fmt.Errorf("the fork server did not take the request: %w", cleanErr(err))
	}
	select {
	case r := <-ch:
		return r.f, r.err
	case <-time.After(time.Minute):
		return nil, errors.New("the fork server did not answer within a minute")
	}
}

// forkable reports why a process with env (beyond torchd's own) and model directories dirs
// cannot be forked, or "".
func (fs *forkServer) forkable(extra []string, dirs []string) string {
	for _, kv := range extra {
		name, _, _ := strings.Cut(kv, "=")
		if name != "PYTHONPATH" && !strings.HasPrefix(name, "TORCHD_") {
			return "its environment sets " + name
		}
	}
	for _, dir := range dirs {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			name := e.Name()
			if !e.IsDir() {
				if i := strings.IndexByte(name, '.'); i > 0 && slices.Contains([]string{".py", ".so", ".pyc"}, filepath.Ext(name)) {
					name = name[:i]
				} else {
					continue
				}
			}
			if fs.modules[name] {
				return fmt.Sprintf("its module %q has the name of one the fork server imported", name)
			}
		}
	}
	return ""
}
