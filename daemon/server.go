// Package daemon is torchd's server, the wiring: it builds the serving core (package core:
// the registry of model versions, their batchers and worker pools), the lifecycle service
// (package lifecycle: registrations, the snapshot, the start-up models, a Triton model
// repository and the model store) and the protocol front-ends (the packages under frontend:
// torchserve, kserve, openai, metrics, webui), and serves them on their ports over fasthttp
// and gRPC (apis.go says which front-end serves where). It owns the configuration, token
// authorization, model URLs and downloads (the lifecycle service's Open) and every goroutine
// it starts. It speaks no protocol itself.
//
// A request goes in one straight line: a front-end → core.Registry.Serve → handler
// Preprocess (in the request's goroutine) → the version's Batcher → a WorkerPool worker
// (batched forward; on a locked OS thread for LibTorch) → handler Postprocess → the front-end's response.
// The HTTP and gRPC layers never call LibTorch.
package daemon

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
	"google.golang.org/grpc"

	"github.com/torchd/torchd/backends/libtorch"
	"github.com/torchd/torchd/backends/onnx"
	"github.com/torchd/torchd/backends/openvino"
	"github.com/torchd/torchd/backends/tritonpy"
	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/frontend"
	"github.com/torchd/torchd/frontend/kserve"
	"github.com/torchd/torchd/frontend/metrics"
	"github.com/torchd/torchd/frontend/openai"
	"github.com/torchd/torchd/frontend/torchserve"
	"github.com/torchd/torchd/frontend/webui"
	"github.com/torchd/torchd/handlerproc"
	"github.com/torchd/torchd/internal/memtrim"
	"github.com/torchd/torchd/internal/tracing"
	"github.com/torchd/torchd/lifecycle"

	"github.com/torchd/torchd/torch"
)

// The serving core's types, as the daemon's tests name them.
type (
	ModelVersion    = core.ModelVersion
	RegisterRequest = core.RegisterRequest
)

// Daemon runs the three servers over one registry.
type Daemon struct {
	cfg      *Config
	log      *slog.Logger
	Registry *core.Registry
	// Life owns the models' lifetimes: registrations, the snapshot, the start-up models,
	// the Triton repository and the model store.
	Life    *lifecycle.Service
	metrics *metrics.Metrics
	keys    *keyring        // nil: token authorization off
	tracer  *tracing.Tracer // nil: tracing off (tracing.go)
	// The front-ends (apis.go).
	ts     *torchserve.API
	kserve *kserve.API
	openai *openai.API
	page   *webui.Page // the web page (nil: enable_ui = false)

	servers   []*fasthttp.Server
	listeners []net.Listener
	// grpcServers are the gRPC APIs (grpc.go); grpcStopping closes when they start to stop,
	// which ends the health watches that would otherwise hold a graceful stop.
	grpcServers  []*grpc.Server
	grpcStopping chan struct{}
	serveWG      sync.WaitGroup
	// sweepStop ends the re-sweep of TMPDIR (see sweep) and the idle trim (see trimWhenIdle).
	sweepStop chan struct{}
	sweepWG   sync.WaitGroup
	// draining is set when a graceful stop begins (see drain); openConns counts the HTTP
	// APIs' connections.
	draining  atomic.Bool
	openConns atomic.Int64
	// trimmedAt is the end of the latest request (Registry.Serving, UnixNano) that the
	// latest idle trim followed.
	trimmedAt atomic.Int64
	// logLevel is the log's level, which POST /v2/logging changes (see UseLogLevel).
	logLevel *slog.LevelVar
}

// New returns a daemon for cfg.
func New(cfg *Config, log *slog.Logger) *Daemon {
	m := metrics.New(cfg.EnableMetrics)
	var life *lifecycle.Service // an ensemble waits for its models while the repository loads them
	reg := core.NewRegistry(core.Options{Pending: func(name string) bool { return life != nil && life.Pending(name) }, Defaults: ModelDefaults(), Server: cfg.Model, PerModel: cfg.TorchServe.PerModel, CacheDir: cfg.CacheDir, DispatchAlone: !cfg.BatchDelayAlone, Runtimes: cfg.runtimes(m), Metrics: m, Log: log})
	m.Statistics = func() []core.Statistics { s, _ := reg.Statistics("", ""); return s }
	d := &Daemon{cfg: cfg, log: log, metrics: m, Registry: reg, sweepStop: make(chan struct{}),
		grpcStopping: make(chan struct{}), logLevel: new(slog.LevelVar)}
	snapshot := cfg.SnapshotFile
	if !cfg.EnableSnapshots {
		snapshot = ""
	}
	life = lifecycle.New(lifecycle.Config{Registry: reg, Open: d.registerModel, ModelStore: cfg.ModelStore, ControlMode: cfg.ModelControlMode,
		SnapshotFile: snapshot, Unregistered: trimMemory, Log: log})
	d.Life = life
	d.frontEnds()
	return d
}

// runtimes are the runtimes beside the built-in LibTorch: handler processes for Python
// handlers (the first to ask: a Python handler's archive may hold any file), ONNX Runtime,
// OpenVINO, and Triton's Python backend (model.py in handler processes of the same Python).
func (c *Config) runtimes(m *metrics.Metrics) []core.Runtime {
	return []core.Runtime{
		&handlerproc.Backend{Python: c.PythonPath(), InstallPyDeps: c.InstallPyDeps, MemoryLimit: int64(c.HandlerMemoryMiB) << 20,
			MetricsConfig: absPath(c.MetricsConfig), OnMetric: handlerMetric(m), StartApart: !c.HandlerForkServer},
		&onnx.Backend{MemoryLimit: c.onnxMemoryLimit()},
		&openvino.Backend{},
		&tritonpy.Backend{Python: c.PythonPath(), MemoryLimit: int64(c.HandlerMemoryMiB) << 20, StartApart: !c.HandlerForkServer},
		libtorch.Backend{},
	}
}

// onnxMemoryLimit is onnx_memory_limit in bytes, "auto" resolved: half of the cgroup's
// memory.max, else of the machine's memory (0 where neither can be read: no limit).
func (c *Config) onnxMemoryLimit() int64 {
	if c.ONNXMemoryMiB >= 0 {
		return int64(c.ONNXMemoryMiB) << 20
	}
	return processMemory() / 2
}

// PythonPath is the handler processes' interpreter: the python setting, else the project's
// venv beside the binary (bin/torchd → .venv/bin/python, as make run builds it), else python3.
func (c *Config) PythonPath() string {
	if c.Python != "" {
		return c.Python
	}
	if exe, err := os.Executable(); err == nil {
		if p := filepath.Join(filepath.Dir(exe), "..", ".venv", "bin", "python"); statOK(p) {
			return p
		}
	}
	return "python3"
}

func statOK(p string) bool { _, err := os.Stat(p); return err == nil }

// UseLogLevel makes lv, the level of the logger given to New, the one the logging API
// reports and changes. Without it the API changes a level no logger reads.
func (d *Daemon) UseLogLevel(lv *slog.LevelVar) { d.logLevel, d.kserve.LogLevel = lv, lv }

// idleTrimAfter is how long the inference API must be idle before the memory a burst left
// free goes back to the operating system. Under load it stays: keep_freed_memory keeps
// LibTorch's freed pages for the next forward, and the image pools keep their buffers.
// After a burst of large images, or once a registration churn stops, an idle server held
// gigabytes without it.
const idleTrimAfter = 30 * time.Second

// trimWhenIdle trims memory once after each burst, when the server has been idle for
// idleTrimAfter, and under load whenever the C heaps hold more free memory than
// keep_freed_memory_mb.
func (d *Daemon) trimWhenIdle() {
	d.sweepWG.Add(1)
	go func() {
		defer d.sweepWG.Done()
		tick := time.NewTicker(idleTrimAfter / 6)
		defer tick.Stop()
		for {
			select {
			case <-d.sweepStop:
				return
			case now := <-tick.C:
				serving, last := d.Registry.Serving()
				switch {
				case !last.IsZero() && last.UnixNano() != d.trimmedAt.Load() && serving == 0 && now.Sub(last) >= idleTrimAfter:
					d.trimmedAt.Store(last.UnixNano())
					trimMemory()
				case d.cfg.KeepFreedMemory && d.cfg.KeepFreedMemoryMB > 0 && memtrim.FreeHeld() > uint64(d.cfg.KeepFreedMemoryMB)<<20:
					// Under load the freed memory is kept for the next forwards, up to the
					// cap: past it, what the heaps hold free goes back, and the forwards
					// that follow fault in what they need again.
					torch.TrimArenas()
					memtrim.TrimC()
				}
			}
		}
	}()
}

// trimMemory gives every free page back: the Go heap's, the C heaps' (memtrim), and first
// the tops of the threads' C heaps, which only torch.TrimArenas reaches.
func trimMemory() {
	torch.TrimArenas()
	memtrim.Trim()
}

// sweepInterval is how often TMPDIR is swept again while another torchd's lock is held: a
// process killed just before this one started may still be dying.
const sweepInterval = 5 * time.Second

// sweep removes what dead torchd processes left in TMPDIR, and sweeps again later while
// some other torchd still holds its lock.
func (d *Daemon) sweep() {
	removed, held := SweepTemp()
	if len(removed) > 0 {
		d.log.Warn("removed what killed torchd processes left in TMPDIR", "dirs", len(removed), "first", removed[0])
	}
	if len(held) == 0 {
		return
	}
	d.sweepWG.Add(1)
	go func() {
		defer d.sweepWG.Done()
		tick := time.NewTicker(sweepInterval)
		defer tick.Stop()
		for {
			select {
			case <-d.sweepStop:
				return
			case <-tick.C:
			}
			removed, held := SweepTemp()
			if len(removed) > 0 {
				d.log.Warn("removed what killed torchd processes left in TMPDIR", "dirs", len(removed), "first", removed[0])
			}
			if len(held) == 0 {
				return
			}
		}
	}()
}

// Start binds the three ports, serves them, and starts loading the start-up models in
// parallel. /ping reports healthy once they are all warm.
func (d *Daemon) Start() error {
	if err := LockProcess(); err != nil {
		d.log.Warn("no lock file in TMPDIR: a later start cannot tell this process's temp files from a dead one's until it exits", "err", err)
	}
	// torchd is the subreaper of what handlers start: a process whose supervisor a handler
	// killed comes here, not to init, and is killed (handlerproc/reaper.go).
	handlerproc.ReapOrphans(d.log)
	// An idle fork server exits, its processes becoming torchd's children (which needs the subreaper above).
	handlerproc.RetireForkServers(d.cfg.HandlerForkLinger)
	if ts := d.cfg.TorchServe; ts != nil && ts.MetricsLog != "" && !d.metrics.Off() {
		f, err := openTSMetricsLog(ts.MetricsLog)
		if err != nil {
			return fmt.Errorf("ts-config %s: metrics_mode=log: %v", ts.Path, err)
		}
		d.metrics.LogTorchServe(f)
		d.log.Info("TorchServe's metrics are written to its log form too (metrics_mode=log)", "file", ts.MetricsLog)
	}
	var specs []metrics.HandlerMetricSpec
	if d.cfg.MetricsConfig != "" {
		var err error
		if specs, err = metrics.ReadTorchServeMetricsConfig(d.cfg.MetricsConfig); err != nil {
			return err
		}
	}
	d.metrics.SetHandlerMetrics(specs, d.cfg.MetricsAutoDetect)
	if d.cfg.ModelRepository != "" {
		if fi, err := os.Stat(d.cfg.ModelRepository); err != nil || !fi.IsDir() {
			return fmt.Errorf("model_repository %s: not a directory", d.cfg.ModelRepository)
		}
		d.Life.OpenRepository(d.cfg.ModelRepository)
	}
	d.sweep()
	d.trimWhenIdle()
	tc := d.cfg.Tracing
	tc.Version = frontend.Version
	d.tracer = tracing.New(tc, d.log)
	d.ts.Tracer, d.kserve.Tracer, d.openai.Tracer = d.tracer, d.tracer, d.tracer
	if d.cfg.KeepFreedMemory && !torch.KeepFreedMemory() {
		d.log.Warn("keep_freed_memory: the C library is not glibc; its allocator's defaults stay")
	}
	if d.cfg.TokenAuth {
		k, created, err := loadKeyring(d.cfg.KeyFile)
		if err != nil {
			return err
		}
		d.keys = k
		if d.page != nil {
			d.page.TokenAuthorization = true
		}
		d.log.Info("token authorization on", "key_file", d.cfg.KeyFile, "created", created)
	}
	var tlsCfg *tls.Config
	if d.cfg.CertificateFile != "" {
		cert, err := tls.LoadX509KeyPair(d.cfg.CertificateFile, d.cfg.PrivateKeyFile)
		if err != nil {
			return fmt.Errorf("TLS: %w", err)
		}
		tlsCfg = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	apis := []struct {
		name, addr string
		h          fasthttp.RequestHandler
	}{
		{"inference", d.cfg.InferenceAddress, frontend.EndTraces(d.tracer, d.countResponses(d.page.Public(d.authorize("inference", d.inferenceRouter(), healthPath))))},
		{"management", d.cfg.ManagementAddress, d.countResponses(d.allowOrigins(d.authorize("management", d.managementRouter(), noPath)))},
		{"metrics", d.cfg.MetricsAddress, frontend.Describe("metrics", d.metrics.Routes()).Serve},
	}
	if !d.cfg.EnableMetrics {
		apis = apis[:2]
	}
	// TorchServe's config.properties may give both APIs one address, which Netty serves
	// together; so does torchd (sharedport.go). Port 0 is any free port, for each its own.
	shared := d.cfg.ManagementAddress == d.cfg.InferenceAddress && !strings.HasSuffix(d.cfg.InferenceAddress, ":0")
	if shared {
		apis[0].h = sharedPort(apis[0].h, apis[1].h)
	}
	for _, a := range apis {
		if shared && a.name == "management" {
			d.listeners = append(d.listeners, d.listeners[0])
			d.log.Info("listening", "api", a.name, "addr", d.listeners[0].Addr().String(), "tls", tlsCfg != nil, "shared_with", "inference")
			continue
		}
		ln, err := net.Listen("tcp", a.addr)
		if err != nil {
			d.closeListeners()
			return fmt.Errorf("%s API: %w", a.name, err)
		}
		d.listeners = append(d.listeners, ln)
		srv := &fasthttp.Server{
			Handler:            d.closeWhenDraining(d.accessLog(a.h)),
			ConnState:          d.countConns,
			Name:               "torchd",
			ReadTimeout:        d.cfg.ReadTimeout,
			WriteTimeout:       d.cfg.WriteTimeout,
			IdleTimeout:        d.cfg.IdleTimeout,
			MaxRequestBodySize: d.cfg.MaxRequestSize,
			// The date header costs a syscall-free cached string; keep it. Disable
			// normalizing header keys only where it matters: never on this hot path.
			NoDefaultContentType: true,
			ErrorHandler:         d.connError,
			CloseOnShutdown:      true,
			// Parse errors then leave the request's bytes out of their messages, which
			// connError sends back: they are noise to the client and may hold its keys.
			SecureErrorLogMessage: true,
		}
		d.servers = append(d.servers, srv)
		if tlsCfg != nil {
			ln = tls.NewListener(ln, tlsCfg)
		}
		d.serveWG.Add(1)
		go func() {
			defer d.serveWG.Done()
			if err := srv.Serve(ln); err != nil {
				d.log.Error("server stopped", "api", a.name, "err", err)
			}
		}()
		d.log.Info("listening", "api", a.name, "addr", ln.Addr().String(), "tls", tlsCfg != nil)
	}
	if err := d.startGRPC(tlsCfg); err != nil {
		d.closeListeners()
		return err
	}
	if !isLoopback(d.listeners[1].Addr()) && d.keys == nil {
		d.log.Warn("the management API is exposed beyond localhost without token authorization: anyone who can reach it can register models, which are code; set enable_token_authorization = true", "addr", d.listeners[1].Addr().String())
	}
	d.loadStartupModels()
	return nil
}

// managementPort is the management API's port, for the web page's calls from the browser:
// only with management_allowed_origins (CORS), once it is bound.
func (d *Daemon) managementPort() (port int, tls, ok bool) {
	if len(d.cfg.ManagementOrigins) == 0 || len(d.listeners) < 2 {
		return 0, false, false
	}
	ta, ok := d.listeners[1].Addr().(*net.TCPAddr)
	if !ok {
		return 0, false, false
	}
	return ta.Port, d.cfg.CertificateFile != "", true
}

func isLoopback(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}

func (d *Daemon) closeListeners() {
	for _, ln := range d.listeners {
		ln.Close()
	}
}

// Addrs returns the bound addresses of the inference, management and metrics APIs; metrics
// is "" when enable_metrics_api is false.
func (d *Daemon) Addrs() (inference, management, metrics string) {
	if len(d.listeners) > 2 {
		metrics = d.listeners[2].Addr().String()
	}
	return d.listeners[0].Addr().String(), d.listeners[1].Addr().String(), metrics
}

// WaitStartup waits until every start-up model has loaded or failed.
func (d *Daemon) WaitStartup() { d.Life.WaitStartup() }

// drainGrace is how long a graceful stop waits for keep-alive connections to send their next
// request, which is answered with Connection: close, before it closes those still idle.
// Closing an idle connection races a request its client may be sending on it, which the
// client then sees reset or unanswered, and a POST cannot safely be sent again; a busy
// client's next request comes within the grace, so only connections idle all along are
// closed under their clients.
const drainGrace = time.Second

// closeWhenDraining answers with Connection: close once a graceful stop has begun, so that
// a keep-alive client sends nothing more on the connection: the server closes it after the
// response. fasthttp's CloseOnShutdown does the same only once Shutdown is called, after
// which it also closes connections just answered without it.
func (d *Daemon) closeWhenDraining(h fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		h(ctx)
		if d.draining.Load() {
			ctx.SetConnectionClose()
		}
	}
}

// countConns counts the HTTP APIs' open connections, for drain.
func (d *Daemon) countConns(_ net.Conn, st fasthttp.ConnState) {
	switch st {
	case fasthttp.StateNew:
		d.openConns.Add(1)
	case fasthttp.StateClosed, fasthttp.StateHijacked:
		d.openConns.Add(-1)
	}
}

// drain stops accepting connections and has every response say Connection: close, then
// waits until no HTTP connection is open, for at most drainGrace (or half of what is left
// of ctx, if less). Shutdown then closes the connections left idle.
func (d *Daemon) drain(ctx context.Context) {
	d.draining.Store(true)
	d.closeListeners()
	grace := drainGrace
	if dl, ok := ctx.Deadline(); ok {
		grace = min(grace, time.Until(dl)/2)
	}
	end := time.NewTimer(grace)
	defer end.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for d.openConns.Load() > 0 {
		select {
		case <-ctx.Done():
			return
		case <-end.C:
			return
		case <-tick.C:
		}
	}
}

// Shutdown stops accepting connections, answers every request already accepted (keep-alive
// clients get Connection: close; see drain), then stops the workers and removes the
// extracted archives. ctx bounds the wait for in-flight requests.
func (d *Daemon) Shutdown(ctx context.Context) error {
	var firstErr error
	var wg sync.WaitGroup
	var mu sync.Mutex
	d.drain(ctx)
	for _, s := range d.servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// drain closed the listeners already.
			if err := s.ShutdownWithContext(ctx); err != nil && !errors.Is(err, net.ErrClosed) {
				mu.Lock()
				firstErr = errors.Join(firstErr, err)
				mu.Unlock()
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		d.stopGRPC(ctx)
	}()
	wg.Wait()
	d.serveWG.Wait()
	d.Life.Stop()
	d.Registry.Close()
	close(d.sweepStop)
	d.sweepWG.Wait()
	if err := d.tracer.Shutdown(ctx); err != nil {
		d.log.Warn("trace export at shutdown", "err", err)
	}
	return firstErr
}

// accessLog wraps h with one log line per request: method, path, status, latency.
func (d *Daemon) accessLog(h fasthttp.RequestHandler) fasthttp.RequestHandler {
	if !d.cfg.AccessLog {
		return h
	}
	return func(ctx *fasthttp.RequestCtx) {
		start := time.Now()
		h(ctx)
		if d.tracer != nil {
			if r := frontend.RESTTrace(ctx); r != nil {
				d.log.Info("access", "remote", ctx.RemoteAddr().String(), "method", string(ctx.Method()),
					"path", string(ctx.Path()), "status", ctx.Response.StatusCode(), "latency", time.Since(start), "trace_id", r.TraceID())
				return
			}
		}
		d.log.Info("access", "remote", ctx.RemoteAddr().String(), "method", string(ctx.Method()),
			"path", string(ctx.Path()), "status", ctx.Response.StatusCode(), "latency", time.Since(start))
	}
}

// connError answers errors fasthttp meets before a handler runs: a body over
// max_request_size (413, without reading it whole), timeouts and malformed requests.
func (d *Daemon) connError(ctx *fasthttp.RequestCtx, err error) {
	switch {
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		frontend.WriteTorchServeError(ctx, 413, "RequestEntityTooLargeException", fmt.Sprintf("request body exceeds max_request_size (%d bytes)", d.cfg.MaxRequestSize))
	case isTimeout(err):
		frontend.WriteTorchServeError(ctx, 408, "RequestTimeoutException", "timed out reading the request")
	case errors.As(err, new(*fasthttp.ErrSmallBuffer)):
		frontend.WriteTorchServeError(ctx, 431, "RequestHeaderFieldsTooLargeException", "the request line and headers exceed 4096 bytes")
	default:
		frontend.WriteTorchServeError(ctx, 400, "BadRequestException", "malformed request: "+err.Error())
	}
	ctx.SetConnectionClose()
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// countResponses counts h's answers in TorchServe's Requests2XX/4XX/5XX.
func (d *Daemon) countResponses(h fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		h(ctx)
		d.metrics.CountResponse(ctx.Response.StatusCode())
	}
}

// loadStartupModels has the lifecycle service load the start-up models in the background:
// the snapshot's, the Triton repository's, config.properties' model_snapshot and the models
// setting's.
func (d *Daemon) loadStartupModels() {
	st := lifecycle.Startup{Models: d.cfg.Models, LoadModels: d.cfg.LoadModels, PollEvery: d.cfg.RepositoryPollSecs}
	if ts := d.cfg.TorchServe; ts != nil {
		for _, k := range ts.Ignored {
			d.log.Info("ts-config: key not used by torchd", "file", ts.Path, "key", k.Key, "why", k.Why)
		}
		for _, m := range ts.Models {
			st.Versions = append(st.Versions, lifecycle.StartupVersion{Name: m.Name, Version: m.Version, URL: m.MarName, Default: m.Default, Settings: m.Settings})
		}
	}
	d.Life.Start(st)
}

// processMemory is the memory this process may use, in bytes: its cgroup's memory.max where
// one is set (a container's limit), else the machine's MemTotal; 0 if neither can be read.
func processMemory() int64 {
	total := int64(0)
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == "MemTotal:" {
				kb, _ := strconv.ParseInt(f[1], 10, 64)
				total = kb << 10
			}
		}
	}
	if b, err := os.ReadFile("/sys/fs/cgroup/memory.max"); err == nil {
		if n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && n > 0 && (total == 0 || n < total) {
			return n
		}
	}
	return total
}

// handlerMetric hands a Python handler's metric (context.metrics) to the metrics port.
func handlerMetric(m *metrics.Metrics) func(string, handlerproc.Metric) {
	return func(_ string, hm handlerproc.Metric) {
		names, values := make([]string, len(hm.Dims)), make([]string, len(hm.Dims))
		for i, d := range hm.Dims {
			names[i], values[i] = d.Name, d.Value
		}
		m.HandlerMetric(hm.Name, hm.Unit, hm.Type, names, values, hm.Host, hm.Value)
	}
}

// absPath is p made absolute against torchd's working directory ("" stays ""): handler
// processes run in their model's directory.
func absPath(p string) string {
	if p == "" {
		return ""
	}
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}
