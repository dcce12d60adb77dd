package torchserve

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/frontend"
	"github.com/torchd/torchd/lifecycle"
	"github.com/torchd/torchd/tuner"
)

// args reads parameters from the query string, or from a JSON body when the request is
// application/json, as TorchServe does.
type args struct {
	query *fasthttp.Args
	body  map[string]any
	log   *slog.Logger
}

func (ts *API) readArgs(ctx *fasthttp.RequestCtx) (args, error) {
	a := args{query: ctx.QueryArgs(), log: ts.Log}
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

func (ts *API) register(ctx *fasthttp.RequestCtx, _ frontend.Params) {
	a, err := ts.readArgs(ctx)
	if err != nil {
		frontend.WriteTorchServeError(ctx, 400, "BadRequestException", err.Error())
		return
	}
	var r lifecycle.Registration
	r.URL, r.URLGiven = a.str("url")
	r.Name, _ = a.str("model_name")
	r.Handler, _ = a.str("handler")
	r.Runtime, _ = a.str("runtime")
	if err := a.settings(&r.Settings); err != nil {
		frontend.WriteAPIError(ctx, err)
		return
	}
	r.Synchronous = a.bool("synchronous", true)
	r.Defaults = ts.tsDefaults()
	done, err := ts.Life.Register(r)
	if err != nil {
		frontend.WriteAPIError(ctx, err)
		return
	}
	code := 200
	if done.Workers > 0 && !done.Synchronous {
		code = 202
	}
	frontend.WriteStatus(ctx, code, registeredMessage(done))
}

// settings reads a registration's serving settings (registrationSettings). batch_size,
// max_batch_delay and initial_workers take "auto"; a number that does not parse leaves the
// setting to the archive or the server, as TorchServe's defaults would.
// QuerySettings reads the per-model settings of a registration's query string
// (batch_size=4&threads=2…) into s, as POST /models does.
func QuerySettings(query *fasthttp.Args, log *slog.Logger, s *archive.Settings) error {
	return args{query: query, log: log}.settings(s)
}

func (a args) settings(s *archive.Settings) error { return registrationSettings(a, a.log, s) }

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

func (ts *API) list(ctx *fasthttp.RequestCtx, _ frontend.Params) {
	a, _ := ts.readArgs(ctx)
	limit, given := a.num("limit", "100")
	offset, _ := a.num("next_page_token", "0")
	frontend.WriteJSON(ctx, 200, ts.listModels(limit, given, offset))
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
	ModelName            string `json:"modelName"`
	ModelVersion         string `json:"modelVersion"`
	ModelURL             string `json:"modelUrl"`
	Runtime              string `json:"runtime"`
	MinWorkers           int    `json:"minWorkers"`
	MaxWorkers           int    `json:"maxWorkers"`
	BatchSize            int    `json:"batchSize"`
	MaxBatchDelay        int64  `json:"maxBatchDelay"`
	ResponseTimeout      int64  `json:"responseTimeout"`
	StartupTimeout       int64  `json:"startupTimeout"`
	MaxRetryTimeoutInSec int    `json:"maxRetryTimeoutInSec"`
	ClientTimeoutInMills int    `json:"clientTimeoutInMills"`
	ParallelType         string `json:"parallelType"`
	ParallelLevel        int    `json:"parallelLevel"`
	DeviceType           string `json:"deviceType"`
	// Precision is torchd's own: the precision served, "auto" settled (fp32, bf16, fp16, int8).
	Precision string `json:"precision,omitempty"`
	// ForwardBatch is torchd's own: the most rows one forward runs, "auto" settled (absent:
	// the whole batch).
	ForwardBatch int `json:"forwardBatch,omitempty"`
	// PreferredBatchSize is torchd's own: the batch sizes formed first (Triton's
	// preferred_batch_size; absent: none).
	PreferredBatchSize []int            `json:"preferredBatchSize,omitempty"`
	LoadedAtStartup    bool             `json:"loadedAtStartup"`
	AutoBatching       *tuner.Status    `json:"autoBatching,omitempty"`
	Handler            string           `json:"handler"`
	Workers            []describeWorker `json:"workers"`
	JobQueueStatus     jobQueueStatus   `json:"jobQueueStatus"`
	Batching           batchingStatus   `json:"batching"`
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

func (ts *API) describe(ctx *fasthttp.RequestCtx, p frontend.Params) {
	out, err := ts.describeModels(p[0], version(p))
	if err != nil {
		frontend.WriteAPIError(ctx, err)
		return
	}
	frontend.WriteJSON(ctx, 200, out)
}

func (ts *API) scale(ctx *fasthttp.RequestCtx, p frontend.Params) {
	a, err := ts.readArgs(ctx)
	if err != nil {
		frontend.WriteTorchServeError(ctx, 400, "BadRequestException", err.Error())
		return
	}
	sc := lifecycle.Scaling{Name: p[0], Version: version(p), Synchronous: a.bool("synchronous", false)}
	if n, ok := a.num("min_worker", "1"); ok {
		sc.Min = archive.Of(n)
	}
	if n, ok := a.num("max_worker", "min_worker"); ok {
		sc.Max = archive.Of(n)
	}
	done, err := ts.Life.Scale(sc)
	if err != nil {
		frontend.WriteAPIError(ctx, err)
		return
	}
	code := 200
	if !done.Synchronous {
		code = 202
	}
	frontend.WriteStatus(ctx, code, scaledMessage(done))
}

func (ts *API) unregister(ctx *fasthttp.RequestCtx, p frontend.Params) {
	if err := ts.Life.Unregister(p[0], version(p)); err != nil {
		frontend.WriteAPIError(ctx, err)
		return
	}
	frontend.WriteStatus(ctx, 200, fmt.Sprintf("Model \"%s\" unregistered", p[0]))
}

func (ts *API) setDefault(ctx *fasthttp.RequestCtx, p frontend.Params) {
	if err := ts.Life.SetDefault(p[0], p[1]); err != nil {
		frontend.WriteAPIError(ctx, err)
		return
	}
	frontend.WriteStatus(ctx, 200, fmt.Sprintf("Default version successfully updated for model \"%s\" to \"%s\"", p[0], p[1]))
}
