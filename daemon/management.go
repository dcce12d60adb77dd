package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/pprofhandler"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/tuner"
)

func (d *Daemon) managementRouter() *router {
	return withDescription("management", []*route{
		{method: "POST", pattern: "/models", summary: "Register a model: url, model_name, handler, runtime, batch_size, max_batch_delay, initial_workers (each a number or auto), latency_target_ms, threads, precision (fp32, bf16, or fp16 for a package exported in it), synchronous, response_timeout, startup_timeout", handle: d.register},
		{method: "GET", pattern: "/models", summary: "List models: limit, next_page_token", handle: d.list},
		{method: "GET", pattern: "/models/{model_name}", summary: "Describe the default version", handle: d.describe},
		{method: "GET", pattern: "/models/{model_name}/{model_version}", summary: "Describe a version, or every version with 'all'", handle: d.describe},
		{method: "PUT", pattern: "/models/{model_name}", summary: "Scale workers: min_worker, max_worker, synchronous", handle: d.scale},
		{method: "PUT", pattern: "/models/{model_name}/{model_version}", summary: "Scale a version's workers", handle: d.scale},
		{method: "DELETE", pattern: "/models/{model_name}", summary: "Unregister the default version", handle: d.unregister},
		{method: "DELETE", pattern: "/models/{model_name}/{model_version}", summary: "Unregister a version", handle: d.unregister},
		{method: "PUT", pattern: "/models/{model_name}/{model_version}/set-default", summary: "Make a version the default", handle: d.setDefault},
		{method: "GET", pattern: "/token", summary: "Rotate a key (token authorization): type=management|inference, authorized by the API key", handle: d.token},
		{method: "GET", pattern: "/debug/pprof/{profile...}", summary: "Go pprof profiles", handle: func(ctx *fasthttp.RequestCtx, _ params) { pprofhandler.PprofHandler(ctx) }},
	})
}

// args reads parameters from the query string, or from a JSON body when the request is
// application/json, as TorchServe does.
type args struct {
	query *fasthttp.Args
	body  map[string]any
	log   *slog.Logger
}

func (d *Daemon) readArgs(ctx *fasthttp.RequestCtx) (args, error) {
	a := args{query: ctx.QueryArgs(), log: d.log}
	if strings.HasPrefix(string(ctx.Request.Header.ContentType()), "application/json") && len(ctx.PostBody()) > 0 {
		if err := json.Unmarshal(ctx.PostBody(), &a.body); err != nil {
			return a, fmt.Errorf("invalid JSON body: %v", err)
		}
	}
	return a, nil
}

func (a args) str(key string) (string, bool) {
	if v, ok := a.body[key]; ok {
		switch x := v.(type) {
		case string:
			return x, true
		case float64:
			return strconv.FormatFloat(x, 'f', -1, 64), true
		case bool:
			return strconv.FormatBool(x), true
		}
		return fmt.Sprint(v), true
	}
	if a.query.Has(key) {
		return string(a.query.Peek(key)), true
	}
	return "", false
}

// num reads an integer parameter. One that does not parse counts as not given, so its
// default applies: TorchServe's scripts rely on that (its getIntParameter falls back to the
// default), so torchd does the same and says so in a warning.
func (a args) num(key, def string) (int, bool) {
	s, ok := a.str(key)
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		a.log.Warn("parameter is not an integer; using its default", "parameter", key, "value", s, "default", def)
		return 0, false
	}
	return n, true
}

// int reads an integer parameter that must be at least min: an integer below it is 400,
// one that does not parse falls back to the default (num).
func (a args) int(key string, min int, def string) (int, bool, error) {
	n, ok := a.num(key, def)
	if ok && n < min {
		return 0, false, apiErr(400, "BadRequestException", "Parameter %s must be an integer ≥ %d, got %d", key, min, n)
	}
	return n, ok, nil
}

// bool reads a boolean as Java's Boolean.parseBoolean does, which TorchServe uses: "true" in
// any case is true and anything else false; a value that is neither true nor false is
// warned about.
func (a args) bool(key string, def bool) bool {
	s, ok := a.str(key)
	if !ok {
		return def
	}
	if !strings.EqualFold(s, "true") && !strings.EqualFold(s, "false") {
		a.log.Warn("parameter is not true or false; taking it as false, as TorchServe does", "parameter", key, "value", s)
	}
	return strings.EqualFold(s, "true")
}

func (d *Daemon) register(ctx *fasthttp.RequestCtx, _ params) {
	a, err := d.readArgs(ctx)
	if err != nil {
		writeError(ctx, 400, "BadRequestException", err.Error())
		return
	}
	req := RegisterRequest{}
	var hasURL bool
	req.URL, hasURL = a.str("url")
	if hasURL && req.URL == "" {
		// TorchServe looks an empty url up in the model store, and finds nothing.
		writeError(ctx, 404, "ModelNotFoundException", "Model not found in model store: ")
		return
	}
	req.Name, _ = a.str("model_name")
	req.Handler, _ = a.str("handler")
	req.Runtime, _ = a.str("runtime")
	if req.Runtime != "" && req.Runtime != "python" && req.Runtime != "python3" && req.Runtime != "torchscript" {
		writeError(ctx, 400, "BadRequestException", "Invalid RuntimeType value: "+req.Runtime)
		return
	}
	if err := a.settings(&req.Settings); err != nil {
		writeAPIError(ctx, err)
		return
	}
	req.Synchronous = a.bool("synchronous", true)
	req.Persist = true
	v, err := d.registerModel(req)
	if err != nil {
		writeAPIError(ctx, err)
		return
	}
	d.failed.remove(v.Name, v.Version) // registered again: no longer failed
	d.saveSnapshot()
	switch {
	case v.Settings().MinWorkers == 0:
		writeStatus(ctx, 200, fmt.Sprintf("Model \"%s\" Version: %s registered with 0 initial workers. Use scale workers API to add workers for the model.", v.Name, v.Version))
	case !req.Synchronous:
		writeStatus(ctx, 202, "Processing worker updates...")
	default:
		writeStatus(ctx, 200, fmt.Sprintf("Model \"%s\" Version: %s registered with %d initial workers", v.Name, v.Version, v.Settings().MinWorkers))
	}
}

// settings reads a registration's serving settings. batch_size, max_batch_delay and
// initial_workers take "auto"; a number below its minimum, or an unknown precision, is 400,
// and a number that does not parse leaves the setting to the archive or the server, as
// TorchServe's defaults would.
func (a args) settings(s *archive.Settings) error {
	isAuto := func(key string) bool { v, _ := a.str(key); return v == "auto" }
	if isAuto("batch_size") {
		s.BatchSize = archive.Auto[int]()
	} else if n, set, err := a.int("batch_size", 1, "the archive's or the server's batch_size"); err != nil {
		return err
	} else if set {
		s.BatchSize = archive.Fixed(n)
	}
	if isAuto("max_batch_delay") {
		s.MaxBatchDelay = archive.Auto[time.Duration]()
	} else if ms, set, err := a.int("max_batch_delay", 0, "the archive's or the server's max_batch_delay"); err != nil {
		return err
	} else if set {
		s.MaxBatchDelay = archive.Fixed(time.Duration(ms) * time.Millisecond)
	}
	if isAuto("initial_workers") {
		s.MinWorkers = archive.Auto[int]()
	} else if n, set := a.num("initial_workers", "the archive's or the server's workers"); set {
		if n < 0 {
			// TorchServe registers a model with a negative initial_workers with none.
			a.log.Warn("initial_workers is negative; registering with 0 workers, as TorchServe does", "value", n)
			n = 0
		}
		s.MinWorkers = archive.Fixed(n)
	}
	if ms, set, err := a.int("latency_target_ms", 1, "the server's latency_target_ms"); err != nil {
		return err
	} else if set {
		s.LatencyTarget = archive.Of(time.Duration(ms) * time.Millisecond)
	}
	if n, set, err := a.int("threads", 1, "the server's threads"); err != nil {
		return err
	} else if set {
		s.Threads = archive.Of(n)
	}
	if sec, set, err := a.int("response_timeout", 1, "the archive's or the server's response_timeout"); err != nil {
		return err
	} else if set {
		s.ResponseTimeout = archive.Of(time.Duration(sec) * time.Second)
	}
	// As TorchServe: -1 is the default, and 0 or less leaves the workers no time to start,
	// so the registration fails.
	if sec, set := a.num("startup_timeout", "the archive's or the server's startup_timeout"); set && sec != -1 {
		s.StartupTimeout = archive.Of(time.Duration(max(sec, 0)) * time.Second)
	}
	if p, ok := a.str("precision"); ok {
		if !slices.Contains(archive.Precisions, p) {
			return apiErr(400, "BadRequestException", "precision %q: want one of %q", p, archive.Precisions)
		}
		s.Precision = archive.Of(p)
	}
	return nil
}

type listEntry struct {
	ModelName string `json:"modelName"`
	ModelURL  string `json:"modelUrl"`
	// Status and Error are set for a snapshot registration that failed to restore.
	Status string `json:"status,omitempty"`
	Error  string `json:"error,omitempty"`
}

type listResponse struct {
	NextPageToken string      `json:"nextPageToken,omitempty"`
	Models        []listEntry `json:"models"`
}

func (d *Daemon) list(ctx *fasthttp.RequestCtx, _ params) {
	a, _ := d.readArgs(ctx)
	// As TorchServe: a limit that does not parse, is negative or is over 100 is 100, and a
	// token that does not parse or is negative is 0.
	limit, set := a.num("limit", "100")
	if !set || limit > 100 || limit < 0 {
		limit = 100
	}
	offset, _ := a.num("next_page_token", "0")
	if offset < 0 {
		offset = 0
	}
	var all []listEntry
	for _, v := range d.Registry.Defaults() {
		all = append(all, listEntry{ModelName: v.Name, ModelURL: v.URL})
	}
	for _, m := range d.failed.all() {
		all = append(all, listEntry{ModelName: m.Name, ModelURL: m.URL, Status: "FAILED", Error: m.Failed})
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
	writeJSON(ctx, 200, resp)
}

// describeWorker and describeModel follow TorchServe's DescribeModelResponse, plus torchd's
// effective batching settings and statistics.
type describeWorker struct {
	ID          string `json:"id"`
	StartTime   string `json:"startTime"`
	Status      string `json:"status"`
	MemoryUsage int    `json:"memoryUsage"`
	PID         int    `json:"pid"`
	GPU         bool   `json:"gpu"`
	GPUUsage    string `json:"gpuUsage"`
}

type describeModel struct {
	ModelName            string           `json:"modelName"`
	ModelVersion         string           `json:"modelVersion"`
	ModelURL             string           `json:"modelUrl"`
	Runtime              string           `json:"runtime"`
	MinWorkers           int              `json:"minWorkers"`
	MaxWorkers           int              `json:"maxWorkers"`
	BatchSize            int              `json:"batchSize"`
	MaxBatchDelay        int64            `json:"maxBatchDelay"`
	ResponseTimeout      int64            `json:"responseTimeout"`
	StartupTimeout       int64            `json:"startupTimeout"`
	MaxRetryTimeoutInSec int              `json:"maxRetryTimeoutInSec"`
	ClientTimeoutInMills int              `json:"clientTimeoutInMills"`
	ParallelType         string           `json:"parallelType"`
	ParallelLevel        int              `json:"parallelLevel"`
	DeviceType           string           `json:"deviceType"`
	LoadedAtStartup      bool             `json:"loadedAtStartup"`
	AutoBatching         *tuner.Status    `json:"autoBatching,omitempty"`
	Handler              string           `json:"handler"`
	Workers              []describeWorker `json:"workers"`
	JobQueueStatus       jobQueueStatus   `json:"jobQueueStatus"`
	Batching             batchingStatus   `json:"batching"`
	// Status and Error are set for a snapshot registration that failed to restore, as in
	// GET /models.
	Status string `json:"status,omitempty"`
	Error  string `json:"error,omitempty"`
}

type jobQueueStatus struct {
	RemainingCapacity int `json:"remainingCapacity"`
	PendingRequests   int `json:"pendingRequests"`
}

// batchingStatus is torchd's own: what the batcher is set to and what it has done.
type batchingStatus struct {
	BatchSize     int     `json:"batchSize"`
	MaxBatchDelay float64 `json:"maxBatchDelayMs"`
	Threads       int     `json:"threadsPerWorker"`
	Batches       int64   `json:"batches"`
	Requests      int64   `json:"requests"`
	MeanBatchSize float64 `json:"meanBatchSize"`
}

func (d *Daemon) describe(ctx *fasthttp.RequestCtx, p params) {
	var versions []*ModelVersion
	var err error
	ver := version(p)
	if ver == "all" {
		versions, _, err = d.Registry.Versions(p[0])
	} else {
		var v *ModelVersion
		if v, err = d.Registry.Get(p[0], ver); err == nil {
			versions = []*ModelVersion{v}
		}
	}
	// A registration that failed to restore is described as GET /models lists it: FAILED,
	// with its error, as it stands in the snapshot.
	var failed []snapshotModel
	if err == nil && ver == "all" || errors.Is(err, core.ErrModelNotFound) || errors.Is(err, core.ErrVersionNotFound) {
		for _, m := range d.failed.all() {
			if m.Name == p[0] && (ver == "" || ver == "all" || ver == m.Version) {
				failed = append(failed, m)
			}
		}
	}
	if err != nil && len(failed) == 0 {
		writeAPIError(ctx, err)
		return
	}
	out := make([]describeModel, 0, len(versions)+len(failed))
	for _, v := range versions {
		out = append(out, d.describeVersion(v))
	}
	for _, m := range failed {
		out = append(out, describeFailed(m))
	}
	writeJSON(ctx, 200, out)
}

// describeFailed describes a registration that failed to restore, from its snapshot entry.
func describeFailed(m snapshotModel) describeModel {
	return describeModel{
		ModelName: m.Name, ModelVersion: m.Version, ModelURL: m.URL, Runtime: "torchscript",
		MinWorkers: m.Workers, MaxWorkers: m.MaxWorkers, BatchSize: m.BatchSize,
		MaxBatchDelay: int64(m.MaxBatchDelayMS), ResponseTimeout: int64(m.ResponseTimeout),
		MaxRetryTimeoutInSec: 300, Handler: m.Handler, Workers: []describeWorker{},
		Status: "FAILED", Error: m.Failed,
	}
}

func (d *Daemon) describeVersion(v *ModelVersion) describeModel {
	s := v.Settings()
	dev := "cpu"
	if strings.HasPrefix(v.Module().Device(), "cuda") {
		dev = "gpu"
	}
	st := v.Stats()
	runtime := "torchscript"
	switch {
	case v.HandlerName == archive.HandlerPython:
		runtime = "python" // handler processes, TorchServe's name for its Python workers
	case v.Archive().IsPackage():
		runtime = "aoti" // an AOTInductor package (.pt2)
	}
	m := describeModel{
		ModelName: v.Name, ModelVersion: v.Version, ModelURL: v.URL, Runtime: runtime,
		MinWorkers: s.MinWorkers, MaxWorkers: s.MaxWorkers, BatchSize: s.BatchSize,
		MaxBatchDelay: s.MaxBatchDelay.Milliseconds(), ResponseTimeout: int64(s.ResponseTimeout.Seconds()),
		StartupTimeout: int64(s.StartupTimeout.Seconds()), MaxRetryTimeoutInSec: 300, DeviceType: dev,
		LoadedAtStartup: v.Startup, Handler: v.HandlerName, Workers: []describeWorker{},
		JobQueueStatus: jobQueueStatus{RemainingCapacity: st.Capacity - st.Pending, PendingRequests: st.Pending},
		Batching: batchingStatus{
			BatchSize: st.BatchSize, MaxBatchDelay: float64(st.MaxDelay) / 1e6,
			Threads: st.Threads, Batches: st.Batches, Requests: st.Items,
			MeanBatchSize: st.MeanBatchSize(),
		},
		AutoBatching: v.AutoBatching(),
	}
	for _, w := range v.Workers() {
		m.Workers = append(m.Workers, describeWorker{
			ID: strconv.Itoa(9000 + w.ID), StartTime: w.StartTime.UTC().Format("2006-01-02T15:04:05.000Z"),
			Status: w.Status, PID: pid, GPU: dev == "gpu", GPUUsage: "N/A",
		})
	}
	return m
}

func (d *Daemon) scale(ctx *fasthttp.RequestCtx, p params) {
	a, err := d.readArgs(ctx)
	if err != nil {
		writeError(ctx, 400, "BadRequestException", err.Error())
		return
	}
	minW, set, err := a.int("min_worker", 0, "1")
	if err != nil {
		writeAPIError(ctx, err)
		return
	}
	if !set {
		minW = 1
	}
	maxW, set, err := a.int("max_worker", 0, "min_worker")
	if err != nil {
		writeAPIError(ctx, err)
		return
	}
	if !set {
		maxW = minW
	}
	if maxW < minW {
		writeError(ctx, 400, "BadRequestException", "max_worker cannot be less than min_worker.")
		return
	}
	sync := a.bool("synchronous", false)
	v, err := d.Registry.Scale(p[0], version(p), minW, maxW, sync)
	if err != nil {
		writeAPIError(ctx, err)
		return
	}
	d.saveSnapshot()
	if !sync {
		writeStatus(ctx, 202, "Processing worker updates...")
		return
	}
	msg := fmt.Sprintf("Workers scaled to %d for model: %s", minW, v.Name)
	if version(p) != "" {
		msg += ", version: " + v.Version
	}
	writeStatus(ctx, 200, msg)
}

func (d *Daemon) unregister(ctx *fasthttp.RequestCtx, p params) {
	if err := d.Registry.Unregister(p[0], version(p)); err != nil {
		notFound := errors.Is(err, core.ErrModelNotFound) || errors.Is(err, core.ErrVersionNotFound)
		if !(notFound && d.failed.remove(p[0], version(p))) {
			writeAPIError(ctx, err)
			return
		}
	}
	d.saveSnapshot()
	// The module and its workers are freed: give their memory back now, rather than let
	// registration churn grow the process in steps of the allocator's padding.
	trimMemory()
	writeStatus(ctx, 200, fmt.Sprintf("Model \"%s\" unregistered", p[0]))
}

func (d *Daemon) setDefault(ctx *fasthttp.RequestCtx, p params) {
	if err := d.Registry.SetDefault(p[0], p[1]); err != nil {
		writeAPIError(ctx, err)
		return
	}
	d.saveSnapshot()
	writeStatus(ctx, 200, fmt.Sprintf("Default version successfully updated for model \"%s\" to \"%s\"", p[0], p[1]))
}
