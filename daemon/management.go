package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/pprofhandler"

	"github.com/torchd/torchd/internal/memtrim"
)

func (d *Daemon) managementRouter() *router {
	return withDescription("management", []*route{
		{method: "POST", pattern: "/models", summary: "Register a model: url, model_name, handler, runtime, batch_size, max_batch_delay, initial_workers (each a number or auto), latency_target_ms, threads, synchronous, response_timeout", handle: d.register},
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
}

func readArgs(ctx *fasthttp.RequestCtx) (args, error) {
	a := args{query: ctx.QueryArgs()}
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

func (a args) int(key string, min int) (int, bool, error) {
	s, ok := a.str(key)
	if !ok {
		return 0, false, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < min {
		return 0, false, apiErr(400, "BadRequestException", "Parameter %s must be an integer ≥ %d, got %q", key, min, s)
	}
	return n, true, nil
}

func (a args) bool(key string, def bool) (bool, error) {
	s, ok := a.str(key)
	if !ok {
		return def, nil
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		return false, apiErr(400, "BadRequestException", "Parameter %s must be true or false, got %q", key, s)
	}
	return b, nil
}

func (d *Daemon) register(ctx *fasthttp.RequestCtx, _ params) {
	a, err := readArgs(ctx)
	if err != nil {
		writeError(ctx, 400, "BadRequestException", err.Error())
		return
	}
	req := RegisterRequest{}
	req.URL, _ = a.str("url")
	req.Name, _ = a.str("model_name")
	req.Handler, _ = a.str("handler")
	req.Runtime, _ = a.str("runtime")
	if req.Runtime != "" && req.Runtime != "python" && req.Runtime != "python3" && req.Runtime != "torchscript" {
		writeError(ctx, 400, "BadRequestException", "Invalid RuntimeType value: "+req.Runtime)
		return
	}
	var set bool
	isAuto := func(key string) bool { v, _ := a.str(key); return v == "auto" }
	req.BatchSizeAuto, req.DelayAuto, req.WorkersAuto = isAuto("batch_size"), isAuto("max_batch_delay"), isAuto("initial_workers")
	if !req.BatchSizeAuto {
		if req.BatchSize, _, err = a.int("batch_size", 1); err != nil {
			writeAPIError(ctx, err)
			return
		}
	}
	var delay, workers, timeout, target int
	if req.DelayAuto {
	} else if delay, set, err = a.int("max_batch_delay", 0); err != nil {
		writeAPIError(ctx, err)
		return
	} else if set {
		dd := time.Duration(delay) * time.Millisecond
		req.MaxBatchDelay = &dd
	}
	if req.WorkersAuto {
	} else if workers, set, err = a.int("initial_workers", 0); err != nil {
		writeAPIError(ctx, err)
		return
	} else if set {
		req.InitialWorkers = &workers
	}
	if target, set, err = a.int("latency_target_ms", 1); err != nil {
		writeAPIError(ctx, err)
		return
	} else if set {
		req.LatencyTarget = time.Duration(target) * time.Millisecond
	}
	if req.Threads, _, err = a.int("threads", 1); err != nil {
		writeAPIError(ctx, err)
		return
	}
	if timeout, set, err = a.int("response_timeout", 1); err != nil {
		writeAPIError(ctx, err)
		return
	} else if set {
		req.ResponseTimeout = time.Duration(timeout) * time.Second
	}
	if req.Synchronous, err = a.bool("synchronous", true); err != nil {
		writeAPIError(ctx, err)
		return
	}
	req.Persist = true
	v, err := d.Registry.Register(req)
	if err != nil {
		writeAPIError(ctx, err)
		return
	}
	d.failed.remove(v.Name, v.Version) // registered again: no longer failed
	d.saveSnapshot()
	switch {
	case v.Settings.MinWorkers == 0:
		writeStatus(ctx, 200, fmt.Sprintf("Model \"%s\" Version: %s registered with 0 initial workers. Use scale workers API to add workers for the model.", v.Name, v.Version))
	case !req.Synchronous:
		writeStatus(ctx, 202, "Processing worker updates...")
	default:
		writeStatus(ctx, 200, fmt.Sprintf("Model \"%s\" Version: %s registered with %d initial workers", v.Name, v.Version, v.Settings.MinWorkers))
	}
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
	a, _ := readArgs(ctx)
	limit, set, err := a.int("limit", -1<<31)
	if err != nil {
		writeAPIError(ctx, err)
		return
	}
	if !set || limit > 100 || limit < 0 {
		limit = 100
	}
	offset, _, err := a.int("next_page_token", 0)
	if err != nil {
		writeAPIError(ctx, err)
		return
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
	AutoBatching         *autoStatus      `json:"autoBatching,omitempty"`
	Handler              string           `json:"handler"`
	Workers              []describeWorker `json:"workers"`
	JobQueueStatus       jobQueueStatus   `json:"jobQueueStatus"`
	Batching             batchingStatus   `json:"batching"`
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
	if ver := version(p); ver == "all" {
		all, _, err := d.Registry.Versions(p[0])
		if err != nil {
			writeAPIError(ctx, err)
			return
		}
		versions = all
	} else {
		v, err := d.Registry.Get(p[0], ver)
		if err != nil {
			writeAPIError(ctx, err)
			return
		}
		versions = []*ModelVersion{v}
	}
	out := make([]describeModel, 0, len(versions))
	for _, v := range versions {
		out = append(out, d.describeVersion(v))
	}
	writeJSON(ctx, 200, out)
}

func (d *Daemon) describeVersion(v *ModelVersion) describeModel {
	s := v.Settings
	dev := "cpu"
	if strings.HasPrefix(v.module.Device(), "cuda") {
		dev = "gpu"
	}
	m := describeModel{
		ModelName: v.Name, ModelVersion: v.Version, ModelURL: v.URL, Runtime: "torchscript",
		MinWorkers: s.MinWorkers, MaxWorkers: s.MaxWorkers, BatchSize: s.BatchSize,
		MaxBatchDelay: s.MaxBatchDelay.Milliseconds(), ResponseTimeout: int64(s.ResponseTimeout.Seconds()),
		StartupTimeout: int64(s.StartupTimeout.Seconds()), MaxRetryTimeoutInSec: 300, DeviceType: dev,
		LoadedAtStartup: v.Startup, Handler: v.HandlerName, Workers: []describeWorker{},
		JobQueueStatus: jobQueueStatus{RemainingCapacity: v.batcher.Capacity() - v.batcher.Pending(), PendingRequests: v.batcher.Pending()},
		Batching: batchingStatus{
			BatchSize: int(v.batcher.batchSize.Load()), MaxBatchDelay: float64(v.batcher.maxDelay.Load()) / 1e6,
			Threads: v.pool.Threads(), Batches: v.batcher.batches.Load(), Requests: v.batcher.batchItems.Load(),
			MeanBatchSize: v.batcher.MeanBatchSize(),
		},
	}
	if v.tuner != nil {
		m.AutoBatching = v.tuner.status()
	}
	for _, w := range v.pool.Workers() {
		m.Workers = append(m.Workers, describeWorker{
			ID: strconv.Itoa(9000 + w.ID), StartTime: w.StartTime.UTC().Format("2006-01-02T15:04:05.000Z"),
			Status: w.Status, PID: pid, GPU: dev == "gpu", GPUUsage: "N/A",
		})
	}
	return m
}

func (d *Daemon) scale(ctx *fasthttp.RequestCtx, p params) {
	a, err := readArgs(ctx)
	if err != nil {
		writeError(ctx, 400, "BadRequestException", err.Error())
		return
	}
	minW, set, err := a.int("min_worker", 0)
	if err != nil {
		writeAPIError(ctx, err)
		return
	}
	if !set {
		minW = 1
	}
	maxW, set, err := a.int("max_worker", 0)
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
	sync, err := a.bool("synchronous", false)
	if err != nil {
		writeAPIError(ctx, err)
		return
	}
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
		var ae *APIError
		if !(errors.As(err, &ae) && ae.Status == 404 && d.failed.remove(p[0], version(p))) {
			writeAPIError(ctx, err)
			return
		}
	}
	d.saveSnapshot()
	// The module and its workers are freed: give their memory back now, rather than let
	// registration churn grow the process in steps of the allocator's padding.
	memtrim.Trim()
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
