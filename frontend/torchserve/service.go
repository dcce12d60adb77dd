package torchserve

import (
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/core"
)

// Management is the management API as a Go service: it registers, unregisters and scales
// model versions, sets the default, and describes and lists them. TorchServe's REST
// management API (management.go), its gRPC ManagementAPIsService (grpc.go) and the
// repository API's control of the model store (package kserve) are codecs over it: each turns
// its request into one call, and the typed result or error into its own answer. Its errors
// carry the core's kinds (core.ErrBadInput for a bad parameter, core.ErrModelNotFound, ...),
// which each protocol maps in one place (apiErrorOf, grpcError).
type Management struct {
	Registry *core.Registry
	// Open loads a registration's archive and adds its version to the registry.
	Open func(core.RegisterRequest) (*core.ModelVersion, error)
	// Failed are the snapshot's registrations that failed to load at start-up: listed,
	// described and removable (nil: none).
	Failed Failed
	// Changed is called after every change: the snapshot follows (nil: nothing to do).
	Changed func()
	// Unregistered is called after a version is unregistered: the memory it held goes back
	// (nil: nothing to do).
	Unregistered func()
	// InitialWorkers are the workers a registration through TorchServe's management API
	// (REST or gRPC) starts when neither it (initial_workers), the archive, nor the server's
	// workers setting names a count: 0 is TorchServe's default; 1 serves at once.
	InitialWorkers int
	Log            *slog.Logger
}

// tsDefaults are the defaults of a registration through TorchServe's management API.
func (m *Management) tsDefaults() archive.Settings {
	return archive.Settings{MinWorkers: archive.Fixed(m.InitialWorkers)}
}

// Failed are registrations restored from the snapshot at start-up that did not load.
type Failed interface {
	// All returns them sorted by name and version.
	All() []FailedModel
	// Remove drops name's of version ("": every version) and reports whether there were any.
	Remove(name, version string) bool
}

// FailedModel is a registration that failed to restore: what describe and list show of it.
type FailedModel struct {
	Name, Version, URL, Handler    string
	Workers, MaxWorkers, BatchSize int
	MaxBatchDelayMS                float64
	ResponseTimeout                float64 // seconds
	// Reason is why it failed to load.
	Reason string
}

func (m *Management) changed() {
	if m.Changed != nil {
		m.Changed()
	}
}

func (m *Management) failed() []FailedModel {
	if m.Failed == nil {
		return nil
	}
	return m.Failed.All()
}

func (m *Management) removeFailed(name, version string) bool {
	return m.Failed != nil && m.Failed.Remove(name, version)
}

// badParam is a management call's bad parameter.
func badParam(format string, args ...any) error {
	return &core.Error{Kind: core.ErrBadInput, Msg: fmt.Sprintf(format, args...)}
}

// Registration is a register call, its parameters read by the protocol.
type Registration struct {
	URL string
	// URLGiven tells an empty url (looked up in the model store and not found, as TorchServe
	// answers it) from none (a bad request).
	URLGiven               bool
	Name, Handler, Runtime string
	Settings               archive.Settings // the registration's layer (registrationSettings)
	Defaults               archive.Settings // the protocol's defaults (core.RegisterRequest.Defaults)
	Synchronous            bool
}

// Registered is what a registration did.
type Registered struct {
	Name, Version string
	Workers       int // 0: registered without workers, which scaling adds
	Synchronous   bool
}

// Message is TorchServe's answer to a registration.
func (r Registered) Message() string {
	switch {
	case r.Workers == 0:
		return fmt.Sprintf("Model \"%s\" Version: %s registered with 0 initial workers. Use scale workers API to add workers for the model.", r.Name, r.Version)
	case !r.Synchronous:
		return "Processing worker updates..."
	}
	return fmt.Sprintf("Model \"%s\" Version: %s registered with %d initial workers", r.Name, r.Version, r.Workers)
}

// Register loads a model version and records it in the snapshot.
func (m *Management) Register(r Registration) (Registered, error) {
	if r.URLGiven && r.URL == "" {
		// TorchServe looks an empty url up in the model store, and finds nothing.
		return Registered{}, &core.Error{Kind: core.ErrModelNotFound, Msg: "Model not found in model store: "}
	}
	if r.Runtime != "" && r.Runtime != "python" && r.Runtime != "python3" && r.Runtime != "torchscript" {
		return Registered{}, badParam("Invalid RuntimeType value: %s", r.Runtime)
	}
	v, err := m.Open(core.RegisterRequest{URL: r.URL, Name: r.Name, Handler: r.Handler, Runtime: r.Runtime,
		Settings: r.Settings, Defaults: r.Defaults, Synchronous: r.Synchronous, Persist: true})
	if err != nil {
		return Registered{}, err
	}
	m.removeFailed(v.Name, v.Version) // registered again: no longer failed
	m.changed()
	return Registered{Name: v.Name, Version: v.Version, Workers: v.Settings().MinWorkers, Synchronous: r.Synchronous}, nil
}

// Scaling is a scale-workers call. An unset Min is 1 and an unset Max is Min, as TorchServe's.
type Scaling struct {
	Name, Version string
	Min, Max      archive.Value[int]
	Synchronous   bool
}

// Scaled is what a scaling did.
type Scaled struct {
	Name, Version string
	Workers       int
	VersionGiven  bool // the call named the version, and the answer names it
	Synchronous   bool
}

// Message is TorchServe's answer to a scaling.
func (s Scaled) Message() string {
	if !s.Synchronous {
		return "Processing worker updates..."
	}
	msg := fmt.Sprintf("Workers scaled to %d for model: %s", s.Workers, s.Name)
	if s.VersionGiven {
		msg += ", version: " + s.Version
	}
	return msg
}

// Scale sets a version's workers.
func (m *Management) Scale(s Scaling) (Scaled, error) {
	minW, maxW := 1, 0
	if s.Min.Set {
		minW = s.Min.V
	}
	if s.Max.Set {
		maxW = s.Max.V
	} else {
		maxW = minW
	}
	if maxW < minW {
		return Scaled{}, badParam("max_worker cannot be less than min_worker.")
	}
	// TorchServe checks only the order and that the model exists: a negative count then
	// fails inside its scaling, which answers 500. So does torchd, with a message that says
	// why; it has no core kind, as no model or request is at fault but the call's.
	for _, p := range []struct {
		key string
		n   int
	}{{"min_worker", minW}, {"max_worker", maxW}} {
		if p.n < 0 {
			if _, err := m.Registry.Get(s.Name, s.Version); err != nil {
				return Scaled{}, err
			}
			return Scaled{}, fmt.Errorf("Parameter %s must be an integer ≥ 0, got %d", p.key, p.n)
		}
	}
	v, err := m.Registry.Scale(s.Name, s.Version, minW, maxW, s.Synchronous)
	if err != nil {
		return Scaled{}, err
	}
	m.changed()
	return Scaled{Name: v.Name, Version: v.Version, Workers: minW, VersionGiven: s.Version != "", Synchronous: s.Synchronous}, nil
}

// Unregister removes a version ("": the default) once its accepted requests are answered, or
// a registration that failed to restore.
func (m *Management) Unregister(name, version string) error {
	if err := m.Registry.Unregister(name, version); err != nil {
		notFound := errors.Is(err, core.ErrModelNotFound) || errors.Is(err, core.ErrVersionNotFound)
		if !(notFound && m.removeFailed(name, version)) {
			return err
		}
	}
	m.changed()
	// The module and its workers are freed: give their memory back now, rather than let
	// registration churn grow the process in steps of the allocator's padding.
	if m.Unregistered != nil {
		m.Unregistered()
	}
	return nil
}

// SetDefault makes a version the default.
func (m *Management) SetDefault(name, version string) error {
	if err := m.Registry.SetDefault(name, version); err != nil {
		return err
	}
	m.changed()
	return nil
}

// List lists the models by name, a page at a time, as TorchServe does: a limit not given,
// negative or over 100 is 100, and a negative offset is 0.
func (m *Management) List(limit int, limitGiven bool, offset int) listResponse {
	if !limitGiven || limit > 100 || limit < 0 {
		limit = 100
	}
	offset = max(offset, 0)
	var all []listEntry
	for _, v := range m.Registry.Defaults() {
		all = append(all, listEntry{ModelName: v.Name, ModelURL: v.URL})
	}
	for _, f := range m.failed() {
		all = append(all, listEntry{ModelName: f.Name, ModelURL: f.URL, Status: "FAILED", Error: f.Reason})
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].ModelName < all[j].ModelName })
	resp := listResponse{Models: []listEntry{}}
	for i := offset; i < len(all) && i < offset+limit; i++ {
		resp.Models = append(resp.Models, all[i])
	}
	// As TorchServe: the token is left out only when offset+limit passes the end.
	if offset+limit <= len(all) {
		resp.NextPageToken = strconv.Itoa(offset + limit)
	}
	return resp
}

// Describe describes a version ("": the default; "all": every version), and the
// registrations of it that failed to restore, FAILED with their error as GET /models lists them.
func (m *Management) Describe(name, version string) ([]describeModel, error) {
	var versions []*core.ModelVersion
	var err error
	if version == "all" {
		versions, _, err = m.Registry.Versions(name)
	} else {
		var v *core.ModelVersion
		if v, err = m.Registry.Get(name, version); err == nil {
			versions = []*core.ModelVersion{v}
		}
	}
	var failed []FailedModel
	if err == nil && version == "all" || errors.Is(err, core.ErrModelNotFound) || errors.Is(err, core.ErrVersionNotFound) {
		for _, f := range m.failed() {
			if f.Name == name && (version == "" || version == "all" || version == f.Version) {
				failed = append(failed, f)
			}
		}
	}
	if err != nil && len(failed) == 0 {
		return nil, err
	}
	out := make([]describeModel, 0, len(versions)+len(failed))
	for _, v := range versions {
		out = append(out, describeVersion(v))
	}
	for _, f := range failed {
		out = append(out, describeFailed(f))
	}
	return out, nil
}

// describeFailed describes a registration that failed to restore, from its snapshot entry.
func describeFailed(m FailedModel) describeModel {
	return describeModel{
		ModelName: m.Name, ModelVersion: m.Version, ModelURL: m.URL, Runtime: "torchscript",
		MinWorkers: m.Workers, MaxWorkers: m.MaxWorkers, BatchSize: m.BatchSize,
		MaxBatchDelay: int64(m.MaxBatchDelayMS), ResponseTimeout: int64(m.ResponseTimeout),
		MaxRetryTimeoutInSec: 300, Handler: m.Handler, Workers: []describeWorker{},
		Status: "FAILED", Error: m.Reason,
	}
}

func describeVersion(v *core.ModelVersion) describeModel {
	s := v.Settings()
	dev := "cpu"
	if strings.HasPrefix(v.Model().Device(), "cuda") {
		dev = "gpu"
	}
	st := v.Stats()
	runtime := "torchscript"
	procs, _ := v.Model().(core.ProcessReporter)
	switch {
	case procs != nil:
		runtime = "python" // handler processes, TorchServe's name for its Python workers
	case v.Model().Kind() != "libtorch":
		runtime = v.Model().Kind() // "onnxruntime", "ensemble"
	case v.Archive().IsPackage():
		runtime = "aoti" // an AOTInductor package (.pt2)
	}
	// A model in processes of its own shows each worker's process, as TorchServe's workers
	// are processes; an in-process model's workers are torchd's.
	var infos []core.ProcessInfo
	if procs != nil {
		infos = procs.Processes()
	}
	m := describeModel{
		ModelName: v.Name, ModelVersion: v.Version, ModelURL: v.URL, Runtime: runtime,
		MinWorkers: s.MinWorkers, MaxWorkers: s.MaxWorkers, BatchSize: s.BatchSize,
		MaxBatchDelay: s.MaxBatchDelay.Milliseconds(), ResponseTimeout: int64(s.ResponseTimeout.Seconds()),
		StartupTimeout: int64(s.StartupTimeout.Seconds()), MaxRetryTimeoutInSec: 300, DeviceType: dev,
		Precision: s.Precision, ForwardBatch: s.ForwardBatch, LoadedAtStartup: v.Startup, Handler: v.HandlerName, Workers: []describeWorker{},
		JobQueueStatus: jobQueueStatus{RemainingCapacity: st.Capacity - st.Pending, PendingRequests: st.Pending},
		Batching: batchingStatus{
			BatchSize: st.BatchSize, MaxBatchDelay: float64(st.MaxDelay) / 1e6,
			Threads: st.Threads, Batches: st.Batches, Requests: st.Items,
			MeanBatchSize: st.MeanBatchSize(),
		},
		AutoBatching: v.AutoBatching(),
	}
	for i, w := range v.Workers() {
		dw := describeWorker{
			ID: strconv.Itoa(9000 + w.ID), StartTime: w.StartTime.UTC().Format("2006-01-02T15:04:05.000Z"),
			Status: w.Status, PID: pid, GPU: dev == "gpu", GPUUsage: "N/A",
		}
		if procs != nil {
			dw.PID = -1 // a worker waiting for a process (none started yet), as TorchServe shows
			if i < len(infos) {
				dw.PID, dw.MemoryUsage = infos[i].PID, int(infos[i].RSSBytes)
			}
		}
		m.Workers = append(m.Workers, dw)
	}
	return m
}

// settingParams are a registration's parameters as a protocol gives them: str a parameter's
// text ("auto", a precision), num an integer one, not given when absent or, for TorchServe's
// REST, when it does not parse (def names the default that then applies).
type settingParams interface {
	str(key string) (string, bool)
	num(key, def string) (int, bool)
}

// registrationSettings reads a registration's serving settings into s, each through
// archive.Settings.Set and its limits, with TorchServe's rules for registrations: a negative
// initial_workers is 0, a startup_timeout of -1 is its default and one of 0 or less fails
// the load. A number outside its limits, or an unknown precision, is a bad parameter.
func registrationSettings(p settingParams, log *slog.Logger, s *archive.Settings) error {
	set := func(param, key string, v any) error {
		err := s.Set(key, v)
		var re *archive.RangeError
		switch {
		case errors.As(err, &re) && re.Got > re.Max:
			return badParam("Parameter %s must be an integer ≤ %d, got %d", param, re.Max, re.Got)
		case errors.As(err, &re):
			return badParam("Parameter %s must be an integer ≥ %d, got %d", param, re.Min, re.Got)
		case err != nil:
			return badParam("Parameter %s: %v", param, err)
		}
		return nil
	}
	for _, k := range []struct{ param, key, def string }{
		{"batch_size", "batch_size", "the archive's or the server's batch_size"},
		{"max_batch_delay", "max_batch_delay", "the archive's or the server's max_batch_delay"},
		{"initial_workers", "min_workers", "the archive's or the server's workers"},
		{"latency_target_ms", "latency_target_ms", "the server's latency_target_ms"},
		{"threads", "threads", "the server's threads"},
		{"forward_batch", "forward_batch", "the archive's or the server's forward_batch"},
		{"response_timeout", "response_timeout", "the archive's or the server's response_timeout"},
		{"startup_timeout", "startup_timeout", "the archive's or the server's startup_timeout"},
	} {
		if v, _ := p.str(k.param); v == "auto" && archive.SettingLimits[k.key].Auto {
			if err := set(k.param, k.key, v); err != nil {
				return err
			}
			continue
		}
		n, given := p.num(k.param, k.def)
		if !given {
			continue
		}
		switch {
		case k.param == "initial_workers" && n < 0:
			// TorchServe registers a model with a negative initial_workers with none.
			log.Warn("initial_workers is negative; registering with 0 workers, as TorchServe does", "value", n)
			n = 0
		case k.param == "startup_timeout" && n == -1:
			continue // TorchServe's default
		case k.param == "startup_timeout":
			// As TorchServe: 0 or less leaves the workers no time to start, so the
			// registration fails.
			n = max(n, 0)
		}
		if err := set(k.param, k.key, int64(n)); err != nil {
			return err
		}
	}
	if v, ok := p.str("precision"); ok {
		if err := s.Set("precision", v); err != nil {
			return badParam("precision %q: want one of %q or %q", v, archive.Precisions, archive.PrecisionAuto)
		}
	}
	return nil
}
