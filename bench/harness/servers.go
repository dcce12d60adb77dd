package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// server is one HTTP model server under test, torchd or a peer, started by the harness in
// its own process group and stopped with it.
type server struct {
	Name   string // in tables: torchd, tornado, fastapi, torchserve, mms
	Label  string // what it is
	Config string // how it is set up, for the docs
	// Secondary peers run fewer rounds (config.secondaryRuns) to keep make bench in budget.
	Secondary bool
	// workers is initial_workers at registration, for servers with a management API.
	workers int

	base    string // inference API, http://127.0.0.1:port
	mgmt    string // management API; "" for the Python peers, which load everything at start
	metrics string // torchd's Prometheus endpoint; "" for peers
	cmd     *exec.Cmd
	logPath string
	tree    procTree
	exited  chan struct{}
	// peakRSS is the most resident memory the process tree held while measured.
	peakRSS int64
}

// freePort asks the kernel for a free port on the loopback interface.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// start runs the server's command in a new process group, its output in logPath.
func (s *server) start(dir string, env []string, name string, args ...string) error {
	logf, err := os.Create(s.logPath)
	if err != nil {
		return err
	}
	s.cmd = exec.Command(name, args...)
	s.cmd.Dir = dir
	s.cmd.Env = env
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	s.tree = procTree{root: s.cmd.Process.Pid}
	s.exited = make(chan struct{})
	go func() {
		s.cmd.Wait()
		logf.Close()
		close(s.exited)
	}()
	return nil
}

// stop sends SIGTERM to the server's process group, then SIGKILL if it is still there
// after grace.
func (s *server) stop(grace time.Duration) {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	pgid := s.cmd.Process.Pid
	syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(grace):
		syscall.Kill(-pgid, syscall.SIGKILL)
		<-s.exited
	}
	// Workers of the Java servers can outlive their parent for a moment.
	syscall.Kill(-pgid, syscall.SIGKILL)
}

// waitPing polls GET /ping until it answers 200.
func (s *server) waitPing(ctx context.Context, timeout time.Duration) error {
	return s.pollPing(ctx, timeout, 100*time.Millisecond)
}

// waitPingFast polls every 5 ms, for the cold start's timing.
func (s *server) waitPingFast(ctx context.Context, timeout time.Duration) error {
	return s.pollPing(ctx, timeout, 5*time.Millisecond)
}

func (s *server) pollPing(ctx context.Context, timeout, every time.Duration) error {
	c := http.Client{Timeout: 10 * time.Second}
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		select {
		case <-s.exited:
			return fmt.Errorf("%s exited: %s", s.Name, logTail(s.logPath))
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		if resp, err := c.Get(s.base + "/ping"); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(every)
	}
	return fmt.Errorf("%s: /ping not healthy after %v: %s", s.Name, timeout, logTail(s.logPath))
}

// register (re)registers a model through the TorchServe management API that torchd,
// TorchServe and MMS share, with the given batching and workers (0: the server's default),
// and waits for it.
func (s *server) register(model string, batch, delayMS, workers int) error {
	if s.mgmt == "" {
		return nil
	}
	del, _ := http.NewRequest(http.MethodDelete, s.mgmt+"/models/"+model, nil)
	if resp, err := http.DefaultClient.Do(del); err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	q := url.Values{}
	q.Set("url", model+".mar")
	q.Set("batch_size", strconv.Itoa(batch))
	q.Set("max_batch_delay", strconv.Itoa(delayMS))
	if workers == 0 {
		workers = max(s.workers, 1)
	}
	q.Set("initial_workers", strconv.Itoa(workers))
	q.Set("synchronous", "true")
	c := http.Client{Timeout: 5 * time.Minute}
	resp, err := c.Post(s.mgmt+"/models?"+q.Encode(), "", nil)
	if err != nil {
		return fmt.Errorf("%s: register %s: %w", s.Name, model, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: register %s: %s: %s", s.Name, model, resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

// predict sends one request and checks for a 200.
func (s *server) predict(w workload) error {
	body, err := os.ReadFile(w.File)
	if err != nil {
		return err
	}
	c := http.Client{Timeout: 2 * time.Minute}
	resp, err := c.Post(s.url(w), w.ContentType, strings.NewReader(string(body)))
	if err != nil {
		return err
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %s: %.200s", s.Name, w.Model, resp.Status, out)
	}
	return nil
}

func (s *server) url(w workload) string { return s.base + "/predictions/" + w.Model }

// batchCounters reads torchd's batch size histogram for a model: sum and count.
func (s *server) batchCounters(model string) (sum, count float64, err error) {
	if s.metrics == "" {
		return 0, 0, nil
	}
	resp, err := http.Get(s.metrics + "/metrics")
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, 0, err
	}
	get := func(suffix string) float64 {
		re := regexp.MustCompile(`(?m)^torchd_batch_size_` + suffix + `\{model="` + regexp.QuoteMeta(model) + `"[^}]*\} ([0-9.e+]+)$`)
		m := re.FindSubmatch(b)
		if m == nil {
			return 0
		}
		f, _ := strconv.ParseFloat(string(m[1]), 64)
		return f
	}
	return get("sum"), get("count"), nil
}

func logTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	return lastLines(string(b), 8)
}

// The servers. Every one serves resnet18, digits and digits_tensor from the same
// TorchScript files (models/out/*/model.pt), one model worker each, on the same cores.

func newTorchd(cfg *config) (*server, error) {
	return startTorchd(cfg, "torchd", "model-store",
		"(intra-op threads: cores / workers, torchd's default)")
}

// newTorchdPT2 is torchd again, serving the zoo's AOTInductor packages (models/out/*/model.pt2,
// models/pt2.py) under the same names and configs, so that the tables put each model's .pt2
// beside its TorchScript file.
func newTorchdPT2(cfg *config) (*server, error) {
	store := filepath.Join(cfg.work, "store-pt2")
	if err := os.MkdirAll(store, 0o755); err != nil {
		return nil, err
	}
	for _, a := range [][3]string{{"resnet18", "resnet18", "resnet18"}, {"digits", "digits", "digits"}, {"digits_tensor", "digits", "digits_tensor"}} {
		name, zoo, config := a[0], a[1], a[2]
		args := []string{"archive", "--model-name", name, "--version", "1.0",
			"--serialized-file", filepath.Join("models/out", zoo, "model.pt2"), "--config-file", filepath.Join("models/configs", config+".toml"),
			"--export-path", store, "--archive-format", "zip-store", "--force"}
		if idx := filepath.Join("models/out", zoo, "index_to_name.json"); fileExists(filepath.Join(cfg.root, idx)) {
			args = append(args, "--extra-files", idx)
		}
		cmd := exec.Command(cfg.torchd, args...)
		cmd.Dir = cfg.root
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("archive %s.pt2: %v: %s", name, err, lastLines(string(out), 2))
		}
	}
	return startTorchd(cfg, "torchd-pt2", store,
		"from the zoo's .pt2 packages (`models/pt2.py`: AOTInductor, batch dimension dynamic) under the same names and configs; "+
			"the same workers and batching as torchd")
}

func fileExists(path string) bool { _, err := os.Stat(path); return err == nil }

func startTorchd(cfg *config, name, store, what string) (*server, error) {
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	s := &server{
		Name:  name,
		Label: "torchd (this repository)",
		Config: "`bin/torchd serve --access-log=false --enable-snapshots=false --job-queue-size 1024`; each model registered " +
			"through the management API with the workers and batching given below " + what,
		base:    fmt.Sprintf("http://127.0.0.1:%d", ports[0]),
		mgmt:    fmt.Sprintf("http://127.0.0.1:%d", ports[1]),
		metrics: fmt.Sprintf("http://127.0.0.1:%d", ports[2]),
		logPath: filepath.Join(cfg.work, "logs", name+".log"),
	}
	if name != "torchd" {
		s.Label = "torchd, AOTInductor packages (.pt2)"
	}
	s.workers = 1
	err = s.start(cfg.root, cfg.serverEnv(), cfg.torchd, "serve", "--access-log=false", "--enable-snapshots=false", "--job-queue-size", "1024",
		"--model-store", store,
		"--inference-address", fmt.Sprintf("127.0.0.1:%d", ports[0]),
		"--management-address", fmt.Sprintf("127.0.0.1:%d", ports[1]),
		"--metrics-address", fmt.Sprintf("127.0.0.1:%d", ports[2]),
		// gRPC off: TorchServe, a peer here, takes 7070 and 7071 too.
		"--grpc-address=", "--grpc-inference-address=", "--grpc-management-address=")
	return s, err
}

func newPythonPeer(cfg *config, name string) (*server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	s := &server{Name: name, base: fmt.Sprintf("http://127.0.0.1:%d", port), logPath: filepath.Join(cfg.work, "logs", name+".log")}
	script := ""
	switch name {
	case "tornado":
		s.Label = "Python: Tornado + a batching thread (up to 64 requests, 1 ms)"
		s.Config = "`.venv/bin/python bench/peers/tornado_batching.py --threads 2`: decode and transforms on the IO loop, " +
			"one batching thread per model with 2 intra-op threads"
		script = "bench/peers/tornado_batching.py"
	case "fastapi":
		s.Label = "Python: FastAPI on uvicorn, no batching"
		s.Config = "`.venv/bin/python bench/peers/fastapi_plain.py --threads 2`: uvicorn with uvloop and httptools, " +
			"one process, one forward per request inside the async endpoint, 2 intra-op threads"
		s.Secondary = true
		script = "bench/peers/fastapi_plain.py"
	default:
		return nil, fmt.Errorf("unknown Python peer %q", name)
	}
	err = s.start(cfg.root, cfg.serverEnv(), cfg.python, script, "--port", strconv.Itoa(port), "--threads", strconv.Itoa(cfg.threads))
	return s, err
}

// javaPeer describes TorchServe or MMS: a venv made by bench/peers/install.sh, and the
// archives it built with the peer's own archiver.
type javaPeer struct {
	name, label, venv, launcher, configFlag, store string
	secondary                                      bool
}

var javaPeers = map[string]javaPeer{
	"torchserve": {"torchserve", "TorchServe", "build/bench/venv-torchserve", "torchserve", "--ts-config", "build/bench/store-torchserve", false},
	"mms":        {"mms", "MMS (multi-model-server)", "build/bench/venv-mms", "multi-model-server", "--mms-config", "build/bench/store-mms", true},
}

// unavailable says why a Java peer cannot run here ("" when it can): the reason
// bench/peers/install.sh wrote, or what is missing.
func (p javaPeer) unavailable(root string) string {
	if b, err := os.ReadFile(filepath.Join(root, "build/bench", p.name+".unavailable")); err == nil {
		return strings.TrimSpace(string(b))
	}
	for _, f := range []string{filepath.Join(p.venv, "bin", p.launcher), filepath.Join(p.store, "resnet18.mar")} {
		if _, err := os.Stat(filepath.Join(root, f)); err != nil {
			return fmt.Sprintf("%s is missing (bench/peers/install.sh did not run)", f)
		}
	}
	return ""
}

func (p javaPeer) version(root string) string {
	out, err := exec.Command(filepath.Join(root, p.venv, "bin", "pip"), "show", map[string]string{"torchserve": "torchserve", "mms": "multi-model-server"}[p.name]).Output()
	if err != nil {
		return "?"
	}
	m := regexp.MustCompile(`(?m)^Version: (\S+)`).FindSubmatch(out)
	if m == nil {
		return "?"
	}
	return string(m[1])
}

func newJavaPeer(cfg *config, p javaPeer) (*server, error) {
	ports, err := freeLowPorts(3)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(cfg.work, "run-"+p.name)
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	// A queue large enough for c=256; no token (TorchServe 0.12 enforces one by default);
	// TorchServe's once-a-minute system metrics script off. Workers are registered as their
	// default: one per core, each a Python process with torch's own thread count.
	props := fmt.Sprintf("inference_address=http://127.0.0.1:%d\nmanagement_address=http://127.0.0.1:%d\n"+
		"model_store=%s\njob_queue_size=1024\n",
		ports[0], ports[1], filepath.Join(cfg.root, p.store))
	if p.name == "torchserve" {
		props += fmt.Sprintf("metrics_address=http://127.0.0.1:%d\ndisable_token_authorization=true\n"+
			"enable_model_api=true\ninstall_py_dep_per_model=false\ndisable_system_metrics=true\n", ports[2])
	}
	if err := os.WriteFile(filepath.Join(dir, "config.properties"), []byte(props), 0o644); err != nil {
		return nil, err
	}
	ver := p.version(cfg.root)
	s := &server{
		Name:      p.name,
		Label:     p.label + " " + ver,
		Secondary: p.secondary,
		workers:   cfg.threads,
		Config: fmt.Sprintf("`%s --start --foreground %s config.properties` from pip (%s) in a venv over the project venv's torch; "+
			"`bench/peers/install.sh` archives the same model.pt files with its own archiver and a handler with the same "+
			"transforms (`bench/%s/`); its defaults (netty threads, and %d workers per model: one per core, each a Python "+
			"process with torch's default of 1 intra-op thread here), `job_queue_size=1024`, the same batching as torchd",
			p.launcher, p.configFlag, ver, p.name, cfg.threads),
		base:    fmt.Sprintf("http://127.0.0.1:%d", ports[0]),
		mgmt:    fmt.Sprintf("http://127.0.0.1:%d", ports[1]),
		logPath: filepath.Join(cfg.work, "logs", p.name+".log"),
	}
	venvBin := filepath.Join(cfg.root, p.venv, "bin")
	var env []string
	for _, e := range cfg.serverEnv() {
		if !strings.HasPrefix(e, "TS_CONFIG_FILE=") && !strings.HasPrefix(e, "PATH=") && !strings.HasPrefix(e, "TMPDIR=") {
			env = append(env, e)
		}
	}
	// The workers are started as "python" from PATH: the venv's, which has the server's
	// Python package and sees the project venv's torch.
	// Both keep their pid file as $TMPDIR/.model_server.pid and refuse to start while it
	// names a live process: each gets a TMPDIR of its own so that they run side by side.
	tmp := filepath.Join(dir, "tmp")
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return nil, err
	}
	env = append(env, "PATH="+venvBin+":"+os.Getenv("PATH"), "TMPDIR="+tmp,
		"LOG_LOCATION="+filepath.Join(dir, "logs"), "METRICS_LOCATION="+filepath.Join(dir, "logs"))
	args := []string{"--start", "--foreground", p.configFlag, "config.properties"}
	if p.name == "torchserve" {
		args = append(args, "--ncs")
	}
	err = s.start(dir, env, filepath.Join(venvBin, p.launcher), args...)
	return s, err
}

// freeLowPorts finds free ports below 32768: MMS refuses larger ones ("Invalid port number").
func freeLowPorts(n int) ([]int, error) {
	var out []int
	for p := 20000 + rand.IntN(10000); len(out) < n && p < 32768; p++ {
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		l.Close()
		out = append(out, p)
	}
	if len(out) < n {
		return nil, errors.New("no free port below 32768")
	}
	return out, nil
}

func freePorts(n int) ([]int, error) {
	var out []int
	seen := map[int]bool{}
	for len(out) < n {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out, nil
}
