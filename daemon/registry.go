package daemon

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/handlers"
	"github.com/torchd/torchd/oip"
	"github.com/torchd/torchd/torch"
	"github.com/torchd/torchd/tuner"
)

// APIError is an error with the HTTP status and TorchServe exception type it is answered with.
type APIError struct {
	Status int
	Type   string
	Msg    string
}

func (e *APIError) Error() string { return e.Msg }

func apiErr(status int, typ, format string, args ...any) *APIError {
	return &APIError{Status: status, Type: typ, Msg: fmt.Sprintf(format, args...)}
}

// ModelVersion is one loaded version of a model: its archive, module, handler, batcher and
// workers.
type ModelVersion struct {
	Name, Version string
	// sig is the v2 signature, resolved once (signature()): a TorchScript schema is a cgo
	// call and a regexp, which no request should pay.
	sigOnce         sync.Once
	sigIns, sigOuts []oip.MetadataTensor
	URL             string
	HandlerName     string
	Settings        ModelSettings
	Startup         bool // loaded at start-up rather than through the API
	// persist records the version in the snapshot (registered through the API, or restored
	// from the snapshot); handlerArg is the handler given at registration, if any, and
	// requestedThreads and requestedPrecision the threads and precision parameters (0, "":
	// none).
	persist            bool
	handlerArg         string
	requestedThreads   int
	requestedPrecision string

	archive *archive.Model
	module  torch.Model
	handler handlers.Handler
	batcher *Batcher
	pool    *WorkerPool
	metrics *modelMetrics
	stats   *versionStats
	active  atomic.Int64 // requests between enter and answered
	warm    atomic.Bool
	tuner   *tuner.Tuner // nil unless batching is automatic
	// triton is set when the version comes from a Triton model repository.
	triton *tritonModel
}

// enter counts a request in, for the auto-batching tuner and for a reload that waits for
// the version's requests to end (retire); answered counts it out.
func (v *ModelVersion) enter() {
	v.active.Add(1)
	if v.tuner != nil {
		v.tuner.Enter()
	}
}

// observe records an answered request's latency for the auto-batching tuner.
func (v *ModelVersion) observe(d time.Duration) {
	if v.tuner != nil {
		v.tuner.Record(d)
	}
}

// answered records a request at its end, whichever API served it: the metrics, the
// statistics and the tuner. took is its whole time in the server.
func (v *ModelVersion) answered(status int, took time.Duration, res jobResult) {
	defer v.active.Add(-1)
	v.metrics.observeRequest(status, took, res.queued)
	v.stats.answered(status, took, res)
	v.observe(took)
}

// Pending returns the queued requests.
func (v *ModelVersion) Pending() int { return v.batcher.Pending() }

// close stops the workers and frees the module and the extracted archive.
func (v *ModelVersion) close() {
	if v.tuner != nil {
		v.tuner.Stop()
	}
	v.batcher.closed.Store(true)
	v.pool.Stop()
	// Requests still queued when the last worker stopped are answered, not dropped.
	for {
		select {
		case j := <-v.batcher.queue:
			j.finish(jobResult{err: apiErr(http.StatusServiceUnavailable, "ServiceUnavailableException", "model %q version %s was unregistered", v.Name, v.Version)})
			continue
		default:
		}
		break
	}
	v.module.Close()
	v.archive.Close()
}

type modelEntry struct {
	versions       map[string]*ModelVersion
	defaultVersion string
}

// Registry owns every loaded model version and its lifetime.
type Registry struct {
	cfg     *Config
	log     *slog.Logger
	metrics *Metrics
	// cores is shared by every model's workers: a forward's threads depend on all forwards.
	cores *coreShare

	mu     sync.RWMutex
	models map[string]*modelEntry
	failed []string    // start-up models that failed to load
	repo   *repository // the Triton model repository; nil without one
}

// NewRegistry returns an empty registry.
func NewRegistry(cfg *Config, m *Metrics, log *slog.Logger) *Registry {
	return &Registry{cfg: cfg, log: log, metrics: m, cores: newCoreShare(cores()), models: map[string]*modelEntry{}}
}

// RegisterRequest carries the management API's register parameters. Zero fields are unset.
type RegisterRequest struct {
	URL             string
	Name            string
	Handler         string
	Runtime         string
	BatchSize       int
	MaxBatchDelay   *time.Duration
	InitialWorkers  *int
	Synchronous     bool
	ResponseTimeout time.Duration
	StartupTimeout  *time.Duration // nil: unset; 0: no time at all, so the registration fails
	Startup         bool
	Persist         bool   // record in the snapshot
	MaxWorkers      int    // 0: unset
	Threads         int    // intra-op threads per worker; 0: unset
	Precision       string // fp32, bf16 or fp16 (packages only); "": the archive's
	// "auto" at registration for batch_size, max_batch_delay, initial_workers, and the
	// latency_target_ms parameter.
	BatchSizeAuto, DelayAuto, WorkersAuto bool
	LatencyTarget                         time.Duration

	// triton is set for a version of a Triton repository model (repository.go).
	triton *tritonModel
}

// Get returns a model version; version "" is the default one.
func (r *Registry) Get(name, version string) (*ModelVersion, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	e, ok := r.models[name]
	if !ok {
		return nil, apiErr(http.StatusNotFound, "ModelNotFoundException", "Model not found: %s", name)
	}
	if version == "" {
		version = e.defaultVersion
	}
	v, ok := e.versions[version]
	if !ok {
		return nil, apiErr(http.StatusNotFound, "ModelVersionNotFoundException", "Model version: %s does not exist for model: %s", version, name)
	}
	if v.pool == nil {
		return nil, apiErr(http.StatusServiceUnavailable, "ServiceUnavailableException", "Model %s version %s is still loading", name, version)
	}
	return v, nil
}

// Versions returns a model's versions sorted by version, and its default version.
func (r *Registry) Versions(name string) ([]*ModelVersion, string, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	e, ok := r.models[name]
	if !ok {
		return nil, "", apiErr(http.StatusNotFound, "ModelNotFoundException", "Model not found: %s", name)
	}
	out := make([]*ModelVersion, 0, len(e.versions))
	for _, v := range e.versions {
		if v.pool != nil {
			out = append(out, v)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, e.defaultVersion, nil
}

// Defaults returns the default version of every model, sorted by name.
func (r *Registry) Defaults() []*ModelVersion {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]*ModelVersion, 0, len(r.models))
	for _, e := range r.models {
		if v := e.versions[e.defaultVersion]; v != nil && v.pool != nil {
			out = append(out, v)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Healthy reports whether every model loaded at start-up is warm.
func (r *Registry) Healthy() bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if len(r.failed) > 0 {
		return false
	}
	for _, e := range r.models {
		for _, v := range e.versions {
			if v.Startup && !v.warm.Load() {
				return false
			}
		}
	}
	return true
}

// Register loads a model version. It answers 409 for a version already registered, 400 for
// an archive or handler torchd cannot serve, and 500 when the model fails to load or warm up;
// a failed registration leaves nothing behind.
func (r *Registry) Register(req RegisterRequest) (*ModelVersion, error) {
	if req.Handler != "" && !archive.IsHandlerName(req.Handler) {
		// TorchServe lets handler= override the archive's and then fails the registration
		// when that handler cannot be loaded, with 500 (its worker fails to start); so does
		// torchd, naming the handler.
		return nil, apiErr(http.StatusInternalServerError, "InternalServerException",
			"handler %q given at registration does not exist; torchd has %s", req.Handler, strings.Join(archive.HandlerNames(), ", "))
	}
	path, cleanup, err := r.resolveURL(req.URL)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	var opts []archive.Option
	if req.Handler != "" {
		opts = append(opts, archive.WithHandler(req.Handler))
	}
	am, err := archive.Open(path, opts...)
	if err != nil {
		return nil, apiErr(http.StatusBadRequest, "ModelException", "%s: %v", req.URL, err)
	}
	// A registration parameter overrides the archive's own setting, the handler included.
	if req.Handler != "" {
		am.Config.Handler = req.Handler
	}
	name := req.Name
	if name == "" {
		name = am.Name
	}
	return r.add(name, am.Version, req, am)
}

// add loads an opened model as version of name, which must not be registered yet.
func (r *Registry) add(name, version string, req RegisterRequest, am *archive.Model) (*ModelVersion, error) {
	if name == "" || strings.ContainsAny(name, "/ ") {
		am.Close()
		return nil, apiErr(http.StatusBadRequest, "BadRequestException", "invalid model name %q", name)
	}
	// Reserve the name and version before the slow load, so a concurrent duplicate gets 409.
	r.mu.Lock()
	e := r.models[name]
	if e != nil {
		if _, dup := e.versions[version]; dup {
			r.mu.Unlock()
			am.Close()
			return nil, apiErr(http.StatusConflict, "ConflictStatusException", "Model version %s is already registered for model %s", version, name)
		}
	} else {
		e = &modelEntry{versions: map[string]*ModelVersion{}}
		r.models[name] = e
	}
	placeholder := &ModelVersion{Name: name, Version: version}
	e.versions[version] = placeholder
	r.mu.Unlock()

	v, err := r.load(name, version, req, am)
	r.mu.Lock()
	if err != nil {
		r.metrics.drop(name, version)
		delete(e.versions, version)
		if len(e.versions) == 0 {
			delete(r.models, name)
		}
	} else {
		e.versions[version] = v
		if e.defaultVersion == "" {
			e.defaultVersion = version
		}
	}
	r.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return v, nil
}

// resolveModelSettings applies the per-model precedence: registration parameters > flags,
// environment and torchd.toml (the server's model defaults, where set) > the archive's
// config > the built-in defaults.
func resolveModelSettings(cfg *Config, ac archive.ModelConfig, req RegisterRequest) ModelSettings {
	s := cfg.Model
	set := cfg.ModelSet
	pickInt := func(key string, server int, arch int) int {
		if set[key] || arch == 0 {
			return server
		}
		return arch
	}
	// batch_size, max_batch_delay and workers may each be "auto"; whichever source wins
	// decides between a number and auto, so a manual setting always beats a lower "auto".
	if !set["batch_size"] {
		switch {
		case ac.BatchSizeAuto:
			s.AutoBatch = true
		case ac.BatchSize > 0:
			s.BatchSize, s.AutoBatch = ac.BatchSize, false
		}
	}
	if !set["max_batch_delay"] {
		switch {
		case ac.MaxBatchDelayAuto:
			s.AutoDelay = true
		case ac.MaxBatchDelay != nil:
			s.MaxBatchDelay, s.AutoDelay = *ac.MaxBatchDelay, false
		}
	}
	if !set["workers"] {
		switch {
		case ac.WorkersAuto:
			s.AutoWorkers = true
		case ac.MinWorkers > 0:
			s.MinWorkers, s.AutoWorkers = ac.MinWorkers, false
		}
	}
	if !set["latency_target_ms"] && ac.LatencyTarget > 0 {
		s.LatencyTarget = ac.LatencyTarget
	}
	s.MaxWorkers = pickInt("max_workers", cfg.Model.MaxWorkers, ac.MaxWorkers)
	s.JobQueueSize = pickInt("job_queue_size", cfg.Model.JobQueueSize, ac.JobQueueSize)
	s.Threads = pickInt("threads", cfg.Model.Threads, ac.Threads)
	if !set["response_timeout"] && ac.ResponseTimeout > 0 {
		s.ResponseTimeout = ac.ResponseTimeout
	}
	if !set["startup_timeout"] && ac.StartupTimeout > 0 {
		s.StartupTimeout = ac.StartupTimeout
	}
	if !set["device"] && ac.Device != "" {
		s.Device = ac.Device
	}
	if !set["freeze"] && ac.Freeze {
		s.Freeze = true
	}
	if !set["optimize_for_inference"] && ac.Optimize {
		s.Optimize = true
	}
	s.Precision = cmp.Or(req.Precision, ac.Precision, "fp32")
	switch {
	case req.BatchSize > 0:
		s.BatchSize, s.AutoBatch = req.BatchSize, false
	case req.BatchSizeAuto:
		s.AutoBatch = true
	}
	switch {
	case req.MaxBatchDelay != nil:
		s.MaxBatchDelay, s.AutoDelay = *req.MaxBatchDelay, false
	case req.DelayAuto:
		s.AutoDelay = true
	}
	switch {
	case req.InitialWorkers != nil:
		s.MinWorkers, s.AutoWorkers = *req.InitialWorkers, false
	case req.WorkersAuto:
		s.AutoWorkers = true
	}
	if req.LatencyTarget > 0 {
		s.LatencyTarget = req.LatencyTarget
	}
	if req.Threads > 0 {
		s.Threads = req.Threads
	}
	if req.ResponseTimeout > 0 {
		s.ResponseTimeout = req.ResponseTimeout
	}
	if req.StartupTimeout != nil {
		s.StartupTimeout = *req.StartupTimeout
	}
	if req.MaxWorkers > 0 {
		s.MaxWorkers = req.MaxWorkers
	}
	if s.MaxWorkers < s.MinWorkers {
		s.MaxWorkers = s.MinWorkers
	}
	return s
}

func (r *Registry) load(name, version string, req RegisterRequest, am *archive.Model) (_ *ModelVersion, err error) {
	handedOff := false // the archive now belongs to a version closing in the background
	defer func() {
		if err != nil && !handedOff {
			am.Close()
		}
	}()
	s := resolveModelSettings(r.cfg, am.Config, req)
	start := time.Now()
	counted := start // startup_timeout counts from here
	// A registration that waits for its workers fails, as TorchServe's does, when they are not
	// loaded and warm within startup_timeout. A load or forward in LibTorch cannot be
	// interrupted, so the steps on this goroutine are checked when each returns.
	wait := req.Synchronous || req.Startup
	timedOut := func() error {
		if !wait || s.MinWorkers == 0 && !s.AutoWorkers || time.Since(counted) <= s.StartupTimeout {
			return nil
		}
		return startupTimedOut(name, version, s.StartupTimeout)
	}
	if err := timedOut(); err != nil {
		return nil, err
	}
	if t := req.triton; t != nil && strings.HasPrefix(s.Device, "cuda") && !torch.CUDAAvailable() {
		return nil, apiErr(http.StatusBadRequest, "ModelException", "model %s: instance_group kind KIND_GPU, but this torchd has no GPU (a CPU build, or no CUDA device): use KIND_CPU", name)
	}
	// A package's compiled code runs only the batch sizes it was exported for, and does not
	// check them itself: a batch_size outside the range the archive records is refused now,
	// before the package is loaded, not at a request.
	if p := am.Package; p != nil {
		if err := p.CheckBatchSize(s.BatchSize); err != nil {
			return nil, apiErr(http.StatusBadRequest, "ModelException", "model %s: %v (%s)", name, err, filepath.Base(am.SerializedPath()))
		}
	}
	if err := checkPrecision(am, s.Precision); err != nil {
		return nil, apiErr(http.StatusBadRequest, "ModelException", "model %s: %v", name, err)
	}
	if s.Precision == "bf16" && !strings.HasPrefix(s.Device, "cuda") && !cpuHasBF16() {
		r.log.Warn("precision bf16 on a CPU without avx512_bf16 or amx_bf16: bfloat16 is emulated, slower than fp32", "model", name)
	}
	module, err := LoadModel(am, s)
	if errors.Is(err, torch.ErrFP32Modules) {
		return nil, apiErr(http.StatusBadRequest, "ModelException", "model %s: fp32_modules: %v", name, err)
	}
	if err != nil {
		return nil, apiErr(http.StatusInternalServerError, "InternalServerException", "failed to load model %s version %s: %v", name, version, err)
	}
	if err := timedOut(); err != nil {
		module.Close()
		return nil, err
	}
	// The package's own specs decide, should the archive's record disagree with them.
	if p, ok := module.(*torch.Package); ok {
		if lo, hi := p.BatchRange(); int64(s.BatchSize) < lo || int64(s.BatchSize) > hi {
			module.Close()
			return nil, apiErr(http.StatusBadRequest, "ModelException", "model %s: batch_size %d is outside the batch range [%d, %d] that %s was exported with", name, s.BatchSize, lo, hi, filepath.Base(am.SerializedPath()))
		}
	}
	if t := req.triton; t != nil {
		if err := t.prepare(am, module); err != nil {
			module.Close()
			return nil, apiErr(http.StatusBadRequest, "ModelException", "model %s version %s: %v", name, version, err)
		}
	}
	h, err := handlers.New(am.Config.Handler, handlers.Context{Config: am.Config, Dir: am.Dir, Labels: am.Labels})
	if err != nil {
		module.Close()
		return nil, apiErr(http.StatusBadRequest, "ModelException", "model %s: %v", name, err)
	}
	// A handler may run more than the serialized file (the captioner's encoder package); the
	// model it returns owns both, one runner per worker the pool may grow to.
	bound, err := handlers.Bind(h, module, max(1, s.MaxWorkers))
	if err != nil {
		module.Close()
		return nil, apiErr(http.StatusBadRequest, "ModelException", "model %s: %v", name, err)
	}
	module = bound
	v := &ModelVersion{
		Name: name, Version: version, URL: req.URL, HandlerName: am.Config.Handler, Settings: s, Startup: req.Startup,
		persist: req.Persist, handlerArg: req.Handler, requestedThreads: req.Threads, requestedPrecision: req.Precision,
		archive: am, module: module, handler: h,
		batcher: NewBatcher(s.JobQueueSize, s.BatchSize, s.MaxBatchDelay),
		triton:  req.triton,
	}
	v.metrics = r.metrics.model(name, version, v.batcher)
	v.stats = newVersionStats()
	warmup, err := warmupSamples(h, am.Config)
	if req.triton != nil {
		warmup, err = req.triton.warmup()
	}
	if err != nil {
		module.Close()
		return nil, apiErr(http.StatusBadRequest, "ModelException", "model %s: %v", name, err)
	}
	// Check the model once on this goroutine so that a model that cannot run its own
	// declared input fails registration with LibTorch's message.
	for _, smp := range warmup[:min(1, len(warmup))] {
		if _, err := handlers.Infer(h, module, []*handlers.Sample{smp}); err != nil {
			module.Close()
			return nil, apiErr(http.StatusInternalServerError, "InternalServerException", "model %s version %s failed its warm-up forward: %v", name, version, err)
		}
	}
	if err := timedOut(); err != nil {
		module.Close()
		return nil, err
	}
	// Measuring the batching curve is torchd's own calibration, not the workers' start:
	// startup_timeout does not count it.
	tuneStart := time.Now()
	tn, err := r.setupAuto(name, &s, h, module, am.SerializedPath(), warmup)
	counted = counted.Add(time.Since(tuneStart))
	if err != nil {
		module.Close()
		return nil, apiErr(http.StatusBadRequest, "ModelException", "%v", err)
	}
	if tn != nil {
		v.Settings = s
		v.batcher.SetBatching(s.BatchSize, s.MaxBatchDelay)
		v.tuner = tn
	}
	v.pool = newWorkerPool(name+":"+version, module, h, v.batcher, r.cores, s.Threads, s.MinWorkers, s.ResponseTimeout, warmup, v.metrics, r.log)
	v.pool.stats = v.stats
	done := make(chan struct{})
	go func() {
		v.pool.Scale(s.MinWorkers, true)
		v.warm.Store(true)
		close(done)
		if v.tuner != nil {
			v.tuner.Run(tuned{v})
		}
	}()
	if wait {
		timer := time.NewTimer(max(s.StartupTimeout-time.Since(counted), 0))
		select {
		case <-done:
			timer.Stop()
		case <-timer.C:
			if s.MinWorkers > 0 || s.AutoWorkers {
				// The workers still starting are stopped once they are up.
				handedOff = true
				go func() { <-done; v.close() }()
				return nil, startupTimedOut(name, version, s.StartupTimeout)
			}
			<-done
		}
	}
	v.signature() // resolved at load, not on the first request
	r.log.Info("model registered", "model", name, "version", version, "handler", v.HandlerName,
		"workers", s.MinWorkers, "batch_size", s.BatchSize, "max_batch_delay", s.MaxBatchDelay,
		"threads", v.pool.Threads(), "device", module.Device(), "precision", s.Precision, "freeze", s.Freeze,
		"optimize_for_inference", s.Optimize, "load_time", time.Since(start).Round(time.Millisecond))
	return v, nil
}

// cpuHasBF16 reports whether this CPU computes in bfloat16 natively (Linux x86).
func cpuHasBF16() bool {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for line := range strings.SplitSeq(string(b), "\n") {
		if strings.HasPrefix(line, "flags") {
			return strings.Contains(line+" ", " avx512_bf16 ") || strings.Contains(line+" ", " amx_bf16 ")
		}
	}
	return false
}

// startupTimedOut is TorchServe's answer to workers that did not start within
// startup_timeout, with the reason added.
func startupTimedOut(name, version string, limit time.Duration) error {
	return apiErr(http.StatusInternalServerError, "InternalServerException",
		"Failed to start workers for model %s version: %s (not loaded and warm within startup_timeout %v)", name, version, limit)
}

// checkPrecision refuses a package served in another precision than it was exported in: a
// package's precision is compiled in.
func checkPrecision(am *archive.Model, precision string) error {
	if am.Package == nil && precision == "fp16" {
		return fmt.Errorf("precision fp16 is for AOTInductor packages exported in fp16 (models/pt2.py --dtype fp16); %s is TorchScript, which runs in fp32 or bf16",
			filepath.Base(am.SerializedPath()))
	}
	if p := am.Package; p != nil && p.Precision != precision {
		return fmt.Errorf("precision %s, but %s was exported in %s; export it in %s (models/pt2.py --dtype, docs/guide/pt2.md) or serve it with precision = %q",
			precision, filepath.Base(am.SerializedPath()), p.Precision, precision, p.Precision)
	}
	return nil
}

// LoadModel loads the archive's serialized file with the settings' device, precision and
// freeze: an AOTInductor package with one runner per worker the pool may grow to (a worker
// beyond them waits for one), else TorchScript.
func LoadModel(am *archive.Model, s ModelSettings) (torch.Model, error) {
	if am.IsPackage() {
		if err := checkPrecision(am, s.Precision); err != nil {
			return nil, err
		}
		return torch.LoadPackage(am.SerializedPath(), torch.WithPackageDevice(s.Device), torch.WithRunners(max(1, s.MaxWorkers)))
	}
	if err := checkPrecision(am, s.Precision); err != nil {
		return nil, err
	}
	lopts := []torch.LoadOption{torch.WithDevice(s.Device)}
	if s.Precision == "bf16" {
		lopts = append(lopts, torch.WithBF16(am.Config.FP32Modules...))
	}
	if s.Freeze {
		lopts = append(lopts, torch.WithFreeze())
	}
	if s.Optimize {
		lopts = append(lopts, torch.WithOptimize())
	}
	return torch.Load(am.SerializedPath(), lopts...)
}

// warmupSamples returns the inputs each worker runs before serving: the handler's own, or
// zeros of the archive's declared input signature (variable dimensions as 1), or none.
func warmupSamples(h handlers.Handler, ac archive.ModelConfig) ([]*handlers.Sample, error) {
	var s *handlers.Sample
	if w, ok := h.(handlers.Warmer); ok {
		s = w.WarmupSample()
	} else if len(ac.Inputs) > 0 {
		s = &handlers.Sample{Items: 1}
		for _, in := range ac.Inputs {
			dt, err := torch.ParseDType(in.DType)
			if err != nil {
				return nil, err
			}
			shape := make([]int64, len(in.Shape))
			n := int64(1)
			for i, d := range in.Shape {
				if d < 0 {
					d = 1
				}
				shape[i] = d
				n *= d
			}
			if len(shape) == 0 || shape[0] != 1 {
				shape = append([]int64{1}, shape...)
			}
			s.Tensors = append(s.Tensors, handlers.Tensor{DType: dt, Shape: shape, Data: make([]byte, n*int64(dt.Size()))})
		}
	}
	if s == nil {
		return nil, nil
	}
	// Three runs let TorchScript's profiling executor settle on this input shape.
	return []*handlers.Sample{s, s, s}, nil
}

// Unregister removes a model version; version "" is the default. The default version cannot
// be removed while other versions exist (403, as TorchServe).
func (r *Registry) Unregister(name, version string) error {
	r.mu.Lock()
	e, ok := r.models[name]
	if !ok {
		r.mu.Unlock()
		return apiErr(http.StatusNotFound, "ModelNotFoundException", "Model not found: %s", name)
	}
	if version == "" {
		version = e.defaultVersion
	}
	v, ok := e.versions[version]
	if !ok || v.pool == nil {
		r.mu.Unlock()
		return apiErr(http.StatusNotFound, "ModelVersionNotFoundException", "Model version: %s does not exist for model: %s", version, name)
	}
	if version == e.defaultVersion && len(e.versions) > 1 {
		r.mu.Unlock()
		return apiErr(http.StatusForbidden, "InvalidModelVersionException", "Cannot remove default version for model %s", name)
	}
	delete(e.versions, version)
	if len(e.versions) == 0 {
		delete(r.models, name)
	}
	r.mu.Unlock()
	v.close()
	r.metrics.drop(name, version)
	r.log.Info("model unregistered", "model", name, "version", version)
	return nil
}

// SetDefault makes version the model's default.
func (r *Registry) SetDefault(name, version string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.models[name]
	if !ok {
		return apiErr(http.StatusNotFound, "ModelNotFoundException", "Model not found: %s", name)
	}
	if v, ok := e.versions[version]; !ok || v.pool == nil {
		return apiErr(http.StatusNotFound, "ModelVersionNotFoundException", "Model version: %s does not exist for model: %s", version, name)
	}
	e.defaultVersion = version
	return nil
}

// Scale sets a version's workers to minWorkers (TorchServe scales to min; max is recorded).
func (r *Registry) Scale(name, version string, minWorkers, maxWorkers int, wait bool) (*ModelVersion, error) {
	v, err := r.Get(name, version)
	if err != nil {
		return nil, err
	}
	if v.pool == nil {
		return nil, apiErr(http.StatusServiceUnavailable, "ServiceUnavailableException", "model %s is still loading", name)
	}
	r.mu.Lock()
	v.Settings.MinWorkers, v.Settings.MaxWorkers = minWorkers, maxWorkers
	r.mu.Unlock()
	v.pool.Scale(minWorkers, wait)
	if v.tuner != nil {
		// The workers' threads follow the count (cores / workers) unless they were set; a
		// thread count the tuner chose for the old count starts over from them.
		v.tuner.SetWorkers(minWorkers, v.pool.Threads())
	}
	return v, nil
}

// Close unregisters every model.
func (r *Registry) Close() {
	r.mu.Lock()
	var all []*ModelVersion
	for _, e := range r.models {
		for _, v := range e.versions {
			if v.pool != nil {
				all = append(all, v)
			}
		}
	}
	r.models = map[string]*modelEntry{}
	r.mu.Unlock()
	var wg sync.WaitGroup
	for _, v := range all {
		wg.Add(1)
		go func() { defer wg.Done(); v.close() }()
	}
	wg.Wait()
}
