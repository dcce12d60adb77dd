package core

import (
	"cmp"
	"errors"
	"path/filepath"
	"strings"
	"time"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/handlers"
)

// load builds a version whole: it resolves the settings, loads the module, makes the
// handler, checks one forward, measures the batching curve when batching is automatic, and
// starts the workers.
func (r *Registry) load(name, version string, req RegisterRequest, am *archive.Model) (_ *ModelVersion, err error) {
	handedOff := false // the archive now belongs to a version closing in the background
	defer func() {
		if err != nil && !handedOff {
			am.Close()
		}
	}()
	s := r.opts.resolve(name, version, am, req)
	start := time.Now()
	clock := &startupClock{name: name, version: version, wait: req.Synchronous || req.Startup, s: &s, counted: start}
	if err := clock.check(); err != nil {
		return nil, err
	}
	modelPath, err := r.settle(name, version, req, am, &s)
	if err != nil {
		return nil, err
	}
	model, err := r.loadModel(name, version, am, s)
	if err != nil {
		return nil, err
	}
	v, warmup, err := r.prepare(name, version, req, am, model, s, clock)
	if err != nil {
		model.Close()
		return nil, err
	}
	if err := r.calibrate(v, &s, modelPath, warmup, clock); err != nil {
		model.Close()
		return nil, err
	}
	if handedOff, err = v.start(s, clock); err != nil {
		return nil, err
	}
	r.log.Info("model registered", "model", name, "version", version, "handler", v.HandlerName,
		"workers", s.MinWorkers, "batch_size", s.BatchSize, "max_batch_delay", s.MaxBatchDelay,
		"threads", v.pool.Threads(), "forward_batch", s.ForwardBatch, "preferred_batch_size", s.PreferredBatchSize, "runtime", model.Kind(), "device", model.Device(), "precision", s.Precision, "freeze", s.Freeze,
		"optimize_for_inference", s.Optimize, "load_time", time.Since(start).Round(time.Millisecond))
	return v, nil
}

// startupClock is startup_timeout for a registration that waits for its workers: it fails,
// as TorchServe's does, when they are not loaded and warm within it. A load or forward in
// LibTorch cannot be interrupted, so the steps on the loading goroutine are checked when
// each returns; torchd's own calibration is not counted (exclude).
type startupClock struct {
	name, version string
	wait          bool // the registration waits for its workers
	s             *ModelSettings
	counted       time.Time // startup_timeout counts from here
}

// check is the registration's error once startup_timeout has passed; nil before.
func (c *startupClock) check() error {
	if !c.wait || c.s.MinWorkers == 0 && !c.s.Auto.MinWorkers || time.Since(c.counted) <= c.s.StartupTimeout {
		return nil
	}
	return startupTimedOut(c.name, c.version, c.s.StartupTimeout)
}

// exclude takes the time since from the count.
func (c *startupClock) exclude(since time.Time) { c.counted = c.counted.Add(time.Since(since)) }

// settle checks the settings against the archive before its model is loaded (the adapter's
// check, a package's batch range) and picks the precision; it returns the model file.
func (r *Registry) settle(name, version string, req RegisterRequest, am *archive.Model, s *ModelSettings) (string, error) {
	if a := req.Adapter; a != nil {
		if err := a.Check(*s); err != nil {
			return "", errorf(ErrBadModel, "model %s: %v", name, err)
		}
	}
	// A package's compiled code runs only the batch sizes it was exported for, and does not
	// check them itself: a batch_size outside the range the archive records is refused now,
	// before the package is loaded, not at a request.
	if p := am.Package; p != nil {
		if err := p.CheckBatchSize(s.BatchSize); err != nil {
			return "", errorf(ErrBadModel, "model %s: %v (%s)", name, err, filepath.Base(am.SerializedPath()))
		}
	}
	precision, reason, err := selectPrecision(am, s.Precision, s.Device, HostCPUFlags())
	if err != nil {
		return "", errorf(ErrBadModel, "model %s: %v", name, err)
	}
	s.Precision = precision
	modelPath := am.SerializedPath()
	if file, _, ok := am.PackageFor(precision); ok {
		modelPath = file
	}
	if reason != "" {
		r.log.Info("precision auto", "model", name, "version", version, "precision", precision,
			"file", filepath.Base(modelPath), "reason", reason)
	}
	if s.Precision == "bf16" && !strings.HasPrefix(s.Device, "cuda") && !cpuHasBF16() {
		r.log.Warn("precision bf16 on a CPU without avx512_bf16 or amx_bf16: bfloat16 is emulated, slower than fp32", "model", name)
	}
	return modelPath, nil
}

// loadModel loads the archive's model with its runtime, or an ensemble's steps.
func (r *Registry) loadModel(name, version string, am *archive.Model, s ModelSettings) (Model, error) {
	rt, err := r.runtimeFor(am)
	if err != nil {
		return nil, err
	}
	var model Model
	if am.Config.Runtime == RuntimeEnsemble {
		model, err = r.loadEnsemble(am, s)
	} else {
		model, err = rt.Load(LoadRequest{Name: name, Version: version, Archive: am, Settings: s, Threads: cmp.Or(s.Threads, autoThreads(s.MinWorkers)), Log: r.log})
	}
	if err != nil {
		var ce *Error
		if errors.As(err, &ce) {
			return nil, err
		}
		return nil, errorf(ErrLoadFailed, "failed to load model %s version %s: %v", name, version, err)
	}
	return model, nil
}

// prepare makes the version over a loaded model: the adapter's preparation, the handler,
// the signature, and one forward of the warm-up input on this goroutine. On an error the
// model is still the caller's. It returns the version and its warm-up input.
func (r *Registry) prepare(name, version string, req RegisterRequest, am *archive.Model, model Model, s ModelSettings, clock *startupClock) (*ModelVersion, []*handlers.Sample, error) {
	if err := clock.check(); err != nil {
		return nil, nil, err
	}
	if a := req.Adapter; a != nil {
		if err := a.Prepare(am, model); err != nil {
			return nil, nil, errorf(ErrBadModel, "model %s version %s: %v", name, version, err)
		}
	}
	// The handler is made after the adapter has settled the signature (its order, or
	// Triton's auto-complete from the model).
	h, err := handlers.New(am.Config.Handler, handlers.Context{Config: am.Config, Dir: am.Dir, Labels: am.Labels})
	if err != nil {
		return nil, nil, errorf(ErrBadModel, "model %s: %v", name, err)
	}
	if hb, ok := model.(HandlerBinder); ok {
		if err := hb.BindHandler(h); err != nil {
			return nil, nil, errorf(ErrBadModel, "model %s: %v", name, err)
		}
	}
	v := &ModelVersion{
		Name: name, Version: version, URL: req.URL, HandlerName: am.Config.Handler, Startup: req.Startup,
		req: req, archive: am, model: model, handler: h, adapter: req.Adapter,
		batcher: NewBatcher(s.JobQueueSize, s.BatchSize, s.MaxBatchDelay),
		stats:   newVersionStats(),
	}
	v.batcher.dispatchAlone = r.opts.DispatchAlone
	v.batcher.SetPreferred(s.PreferredBatchSize)
	if p := s.PreferredBatchSize; len(p) > 0 && p[len(p)-1] > s.BatchSize && !s.Auto.BatchSize {
		r.log.Warn("preferred batch sizes above the batch size are not used", "model", name, "version", version,
			"batch_size", s.BatchSize, "preferred_batch_size", p)
	}
	v.setSettings(s)
	v.state.Store(int32(StateWarming))
	v.ins, v.outs = resolveSignature(am, model, req.Adapter != nil)
	v.metrics = r.metrics.Version(v)
	warmup, err := warmupFor(h, model, req.Adapter, am.Config)
	if err != nil {
		return nil, nil, errorf(ErrBadModel, "model %s: %v", name, err)
	}
	// Check the model once on this goroutine so that a model that cannot run its own
	// declared input fails registration with its runtime's message.
	for _, smp := range warmup[:min(1, len(warmup))] {
		if _, err := model.Run([]*handlers.Sample{smp}, nil); err != nil {
			return nil, nil, errorf(ErrLoadFailed, "model %s version %s failed its warm-up forward: %v", name, version, err)
		}
	}
	if err := clock.check(); err != nil {
		return nil, nil, err
	}
	return v, warmup, nil
}

// warmupFor is the input a model's workers warm up on: its handler's or its archive's, or
// zeros of the inputs a model reports itself; none for a handler process (its handler warms
// up in initialize, as in TorchServe) or an ensemble (its models warmed up themselves).
func warmupFor(h handlers.Handler, model Model, adapter Adapter, ac archive.ModelConfig) ([]*handlers.Sample, error) {
	warmup, err := warmupSamples(h, ac)
	if _, schema := model.(SchemaSigned); !schema && err == nil && warmup == nil {
		sg, _ := model.(Signed)
		// A model that reports its own inputs (an ONNX graph's) warms up on zeros of them
		// when its archive declares none.
		if sg != nil {
			ins, _ := sg.Signature()
			warmup, err = warmupSamples(h, archive.ModelConfig{Inputs: ins})
		}
	}
	if _, ok := model.(ProcessReporter); ok {
		warmup = nil
	}
	if adapter != nil {
		warmup, err = adapter.Warmup()
	}
	if _, ok := model.(composite); ok {
		warmup, err = nil, nil
	}
	return warmup, err
}

// calibrate measures the batching curve when batching is automatic, and the forward batch:
// torchd's own calibration, not the workers' start, which startup_timeout does not count.
func (r *Registry) calibrate(v *ModelVersion, s *ModelSettings, modelPath string, warmup []*handlers.Sample, clock *startupClock) error {
	tuneStart := time.Now()
	tn, err := r.setupAuto(v.Name, s, v.handler, v.model, modelPath, warmup)
	clock.exclude(tuneStart)
	if err != nil {
		return errorf(ErrBadModel, "%v", err)
	}
	if tn != nil {
		v.setSettings(*s)
		v.batcher.SetBatching(s.BatchSize, s.MaxBatchDelay)
		v.tuner = tn
	}
	tuneStart = time.Now()
	err = r.setupForwardBatch(v.Name, s, v.handler, v.model, modelPath, warmup)
	clock.exclude(tuneStart)
	if err != nil {
		return errorf(ErrBadModel, "%v", err)
	}
	if sp, ok := v.model.(ShapePlanned); ok {
		kept, err := sp.PlanRows(ForwardRows(*s))
		if err != nil {
			return errorf(ErrLoadFailed, "failed to load model %s version %s: %v", v.Name, v.Version, err)
		}
		v.batcher.SetWhole(wholeForwards(*s, kept))
	}
	v.setSettings(*s)
	v.pool = newWorkerPool(v.Name+":"+v.Version, v.model, v.batcher, r.cores, s.Threads, s.MinWorkers, s.ResponseTimeout, warmup, v.metrics, r.log)
	v.pool.stats = v.stats
	v.pool.rows = s.ForwardBatch
	v.pool.model, v.pool.version = v.Name, v.Version
	return nil
}

// start starts v's workers, then its tuner; a registration that waits for them returns when
// they are warm, or fails at startup_timeout. handedOff: v, and its archive, close in the
// background (their workers stop at their next forward).
func (v *ModelVersion) start(s ModelSettings, clock *startupClock) (handedOff bool, err error) {
	done := make(chan struct{})
	go func() {
		v.pool.Scale(s.MinWorkers, true)
		v.state.Store(int32(StateReady))
		close(done)
		if v.tuner != nil {
			v.tuner.Run(tuned{v})
		}
	}()
	if !clock.wait {
		return false, nil
	}
	timer := time.NewTimer(max(s.StartupTimeout-time.Since(clock.counted), 0))
	select {
	case <-done:
		timer.Stop()
	case <-timer.C:
		if s.MinWorkers > 0 || s.Auto.MinWorkers {
			// The workers still warming up stop at their next forward, then the version
			// closes (a forward in progress cannot be interrupted).
			v.pool.abandon()
			go func() { <-done; v.close() }()
			return true, startupTimedOut(v.Name, v.Version, s.StartupTimeout)
		}
		<-done
	}
	return false, nil
}

// startupTimedOut is TorchServe's answer to workers that did not start within
// startup_timeout, with the reason added.
func startupTimedOut(name, version string, limit time.Duration) error {
	return errorf(ErrStartupTimeout, "Failed to start workers for model %s version: %s (not loaded and warm within startup_timeout %v)", name, version, limit)
}

// warmupSamples returns the inputs each worker runs before serving: the handler's own, or
// zeros of the archive's declared input signature (variable dimensions as 1), or none.
func warmupSamples(h handlers.Handler, ac archive.ModelConfig) ([]*handlers.Sample, error) {
	var s *handlers.Sample
	if w, ok := h.(handlers.Warmer); ok {
		s = w.WarmupSample()
	} else if len(ac.Inputs) > 0 {
		var err error
		if s, err = handlers.ZeroSample(ac.Inputs); err != nil {
			return nil, err
		}
	}
	if s == nil {
		return nil, nil
	}
	// Three runs let TorchScript's profiling executor settle on this input shape.
	return []*handlers.Sample{s, s, s}, nil
}

// resolveSignature is a version's inputs and outputs: an AOTInductor package's recorded
// specs (unless it is a plain package whose config declares and names them), else the
// archive's declared ones, else inputs named after forward's Tensor arguments with unknown
// shapes. A package's specs are what its compiled code was made
// for; an adapted registration's (Triton's config) were checked against them at load.
func resolveSignature(am *archive.Model, m Model, adapted bool) (ins, outs []archive.TensorSpec) {
	plain := am.Package != nil && am.Package.Plain && am.Config.Inputs != nil
	if sg, ok := m.(Signed); ok && !adapted && !plain {
		ins, outs = sg.Signature()
	}
	if ins == nil {
		ins = am.Config.Inputs
	}
	if outs == nil {
		outs = am.Config.Outputs
	}
	if ss, ok := m.(SchemaSigned); ok && ins == nil {
		ins = ss.SchemaInputs()
	}
	if outs == nil {
		outs = []archive.TensorSpec{{Name: "output__0", DType: "float32", Shape: []int64{-1}}}
	}
	return ins, outs
}
