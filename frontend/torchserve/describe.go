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
	"github.com/torchd/torchd/lifecycle"
)

// TorchServe's management answers over the lifecycle service, which REST (management.go)
// and gRPC (grpc.go) share: its messages, its list and describe bodies, and a registration's
// parameters read as settings.

// registeredMessage is TorchServe's answer to a registration.
func registeredMessage(r lifecycle.Registered) string {
	switch {
	case r.Workers == 0:
		return fmt.Sprintf("Model \"%s\" Version: %s registered with 0 initial workers. Use scale workers API to add workers for the model.", r.Name, r.Version)
	case !r.Synchronous:
		return "Processing worker updates..."
	}
	return fmt.Sprintf("Model \"%s\" Version: %s registered with %d initial workers", r.Name, r.Version, r.Workers)
}

// scaledMessage is TorchServe's answer to a scaling.
func scaledMessage(s lifecycle.Scaled) string {
	if !s.Synchronous {
		return "Processing worker updates..."
	}
	msg := fmt.Sprintf("Workers scaled to %d for model: %s", s.Workers, s.Name)
	if s.VersionGiven {
		msg += ", version: " + s.Version
	}
	return msg
}

// tsDefaults are the defaults of a registration through TorchServe's management API.
func (a *API) tsDefaults() archive.Settings {
	return archive.Settings{MinWorkers: archive.Fixed(a.InitialWorkers)}
}

// badParam is a management call's bad parameter.
func badParam(format string, args ...any) error {
	return &core.Error{Kind: core.ErrBadInput, Msg: fmt.Sprintf(format, args...)}
}

// listModels lists the models by name, a page at a time, as TorchServe does: a limit not given,
// negative or over 100 is 100, and a negative offset is 0.
func (a *API) listModels(limit int, limitGiven bool, offset int) listResponse {
	if !limitGiven || limit > 100 || limit < 0 {
		limit = 100
	}
	offset = max(offset, 0)
	var all []listEntry
	for _, v := range a.Registry.Defaults() {
		all = append(all, listEntry{ModelName: v.Name, ModelURL: v.URL})
	}
	for _, f := range a.Life.Restores() {
		all = append(all, listEntry{ModelName: f.Name, ModelURL: f.Restore.URL, Status: "FAILED", Error: f.Reason})
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

// describeModels describes a version ("": the default; "all": every version), and the
// registrations of it that failed to restore, FAILED with their error as GET /models lists them.
func (a *API) describeModels(name, version string) ([]describeModel, error) {
	var versions []*core.ModelVersion
	var err error
	if version == "all" {
		versions, _, err = a.Registry.Versions(name)
	} else {
		var v *core.ModelVersion
		if v, err = a.Registry.Get(name, version); err == nil {
			versions = []*core.ModelVersion{v}
		}
	}
	var failed []lifecycle.Record
	if err == nil && version == "all" || errors.Is(err, core.ErrModelNotFound) || errors.Is(err, core.ErrVersionNotFound) {
		for _, f := range a.Life.Restores() {
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
func describeFailed(f lifecycle.Record) describeModel {
	m := f.Restore
	return describeModel{
		ModelName: m.Name, ModelVersion: m.Version, ModelURL: m.URL, Runtime: "torchscript",
		MinWorkers: m.Workers, MaxWorkers: m.MaxWorkers, BatchSize: m.BatchSize,
		MaxBatchDelay: int64(m.MaxBatchDelayMS), ResponseTimeout: int64(m.ResponseTimeout),
		MaxRetryTimeoutInSec: 300, Handler: m.Handler, Workers: []describeWorker{},
		Status: "FAILED", Error: f.Reason,
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
		Precision: s.Precision, ForwardBatch: s.ForwardBatch, PreferredBatchSize: s.PreferredBatchSize, LoadedAtStartup: v.Startup, Handler: v.HandlerName, Workers: []describeWorker{},
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
