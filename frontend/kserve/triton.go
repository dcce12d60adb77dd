package kserve

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"

	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/frontend"
	"github.com/valyala/fasthttp"
)

// Triton's protocol extensions over REST, on the inference port: statistics, the model
// repository and logging. Each is a thin codec over a protocol-neutral Registry or API
// function, which gRPC serves too.
func (a *API) tritonRoutes() []*frontend.Route {
	return []*frontend.Route{
		{Method: "GET", Pattern: "/v2/models/stats", Summary: "Triton statistics of every loaded model version", Handle: a.v2Stats},
		{Method: "GET", Pattern: "/v2/models/{model_name}/stats", Summary: "Triton statistics of a model's loaded versions", Handle: a.v2Stats},
		{Method: "GET", Pattern: "/v2/models/{model_name}/versions/{model_version}/stats", Summary: "Triton statistics of a version", Handle: a.v2Stats},
		{Method: "POST", Pattern: "/v2/repository/index", Summary: "Triton repository index: every model with its versions' state and reason", Handle: a.v2RepositoryIndex},
		{Method: "POST", Pattern: "/v2/repository/models/{model_name}/load", Summary: "Load or reload a repository model (--model-control-mode explicit); {\"parameters\": {\"config\": \"<json>\"}} overrides config.pbtxt", Handle: a.v2RepositoryLoad},
		{Method: "POST", Pattern: "/v2/repository/models/{model_name}/unload", Summary: "Unload a repository model once its accepted requests are answered (explicit mode)", Handle: a.v2RepositoryUnload},
		{Method: "GET", Pattern: "/v2/logging", Summary: "Triton log settings, mapped from the log level", Handle: a.v2Logging},
		{Method: "POST", Pattern: "/v2/logging", Summary: "Change the log level with Triton's log settings", Handle: a.v2Logging},
	}
}

// tritonExtensions are the Triton extensions advertised in GET /v2 beside the core protocol;
// "statistics" too while every version is an integer (see v2Server).
var tritonExtensions = []string{"model_repository", "logging", "classification"}

func (a *API) v2Stats(ctx *fasthttp.RequestCtx, p frontend.Params) {
	name := ""
	if len(p) > 0 {
		name = p[0]
	}
	stats, err := a.Registry.Statistics(name, v2Version(p))
	if err != nil {
		v2APIError(ctx, err)
		return
	}
	writeCompactJSON(ctx, map[string]any{"model_stats": tritonStatistics(stats)})
}

// repositoryBody decodes a repository request's optional JSON body.
func repositoryBody(ctx *fasthttp.RequestCtx, into any) error {
	body := bytes.TrimSpace(ctx.PostBody())
	if len(body) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(into); err != nil {
		return fmt.Errorf("malformed request body: %v", err)
	}
	return nil
}

func (a *API) v2RepositoryIndex(ctx *fasthttp.RequestCtx, _ frontend.Params) {
	var req struct {
		Ready bool `json:"ready"`
	}
	if err := repositoryBody(ctx, &req); err != nil {
		WriteError(ctx, 400, err.Error())
		return
	}
	idx, err := a.Life.Index(req.Ready)
	if err != nil {
		v2APIError(ctx, err)
		return
	}
	writeCompactJSON(ctx, idx)
}

func (a *API) v2RepositoryLoad(ctx *fasthttp.RequestCtx, p frontend.Params) {
	var req struct {
		Parameters map[string]json.RawMessage `json:"parameters"`
	}
	if err := repositoryBody(ctx, &req); err != nil {
		WriteError(ctx, 400, err.Error())
		return
	}
	var config []byte
	for k, raw := range req.Parameters {
		switch {
		case k == "config":
			var s string
			if err := json.Unmarshal(raw, &s); err != nil {
				WriteError(ctx, 400, "parameter config must be a string holding the model configuration in JSON")
				return
			}
			config = []byte(s)
		case len(k) > 5 && k[:5] == "file:":
			WriteError(ctx, 400, fmt.Sprintf("parameter %q: loading model files sent in the request is not supported; put them in the model repository", k))
			return
		default:
			WriteError(ctx, 400, fmt.Sprintf("unknown load parameter %q (torchd reads \"config\")", k))
			return
		}
	}
	if err := a.Life.Load(p[0], config); err != nil {
		v2APIError(ctx, err)
		return
	}
	ctx.SetStatusCode(200)
}

func (a *API) v2RepositoryUnload(ctx *fasthttp.RequestCtx, p frontend.Params) {
	var req struct {
		Parameters map[string]json.RawMessage `json:"parameters"`
	}
	if err := repositoryBody(ctx, &req); err != nil {
		WriteError(ctx, 400, err.Error())
		return
	}
	for k := range req.Parameters {
		// A torchd model has no dependents (no ensembles), so unload_dependents changes nothing.
		if k != "unload_dependents" {
			WriteError(ctx, 400, fmt.Sprintf("unknown unload parameter %q (torchd reads \"unload_dependents\")", k))
			return
		}
	}
	if err := a.Life.Unload(p[0]); err != nil {
		v2APIError(ctx, err)
		return
	}
	ctx.SetStatusCode(200)
}

// LogSettings are Triton's log settings. torchd logs through one slog level: verbose means
// Debug, then info, warning and error switch Info, Warn and Error on from the top down.
type LogSettings struct {
	LogFile         *string `json:"log_file,omitempty"`
	LogInfo         *bool   `json:"log_info,omitempty"`
	LogWarning      *bool   `json:"log_warning,omitempty"`
	LogError        *bool   `json:"log_error,omitempty"`
	LogVerboseLevel *int    `json:"log_verbose_level,omitempty"`
	LogFormat       *string `json:"log_format,omitempty"`
}

// levelOff is above every level slog logs at: nothing is written.
const levelOff = slog.LevelError + 4

// LogSettings returns the log settings as Triton reports them.
func (a *API) LogSettings() LogSettings {
	l := a.LogLevel.Level()
	file, format := "", "default"
	verbose := 0
	if l <= slog.LevelDebug {
		verbose = 1
	}
	info, warn, errs := l <= slog.LevelInfo, l <= slog.LevelWarn, l <= slog.LevelError
	return LogSettings{LogFile: &file, LogInfo: &info, LogWarning: &warn, LogError: &errs, LogVerboseLevel: &verbose, LogFormat: &format}
}

// SetLogSettings applies Triton's log settings to the log level; fields left out keep
// their value. A log file or another format is refused: torchd writes to stderr in the
// format chosen at start (log_format).
func (a *API) SetLogSettings(s LogSettings) error {
	if s.LogFile != nil && *s.LogFile != "" {
		return core.Errorf(core.ErrBadInput, "log_file: torchd logs to stderr; redirect it to a file instead")
	}
	if s.LogFormat != nil && *s.LogFormat != "default" {
		return core.Errorf(core.ErrBadInput, "log_format %q: torchd's format is set at start (log_format = text or json); send \"default\"", *s.LogFormat)
	}
	if s.LogVerboseLevel != nil && *s.LogVerboseLevel < 0 {
		return core.Errorf(core.ErrBadInput, "log_verbose_level must be ≥ 0, got %d", *s.LogVerboseLevel)
	}
	cur := a.LogSettings()
	pick := func(p, def *bool) bool {
		if p != nil {
			return *p
		}
		return *def
	}
	verbose := *cur.LogVerboseLevel
	if s.LogVerboseLevel != nil {
		verbose = *s.LogVerboseLevel
	}
	info, warn, errs := pick(s.LogInfo, cur.LogInfo), pick(s.LogWarning, cur.LogWarning), pick(s.LogError, cur.LogError)
	level := levelOff
	switch {
	case verbose > 0:
		level = slog.LevelDebug
	case info:
		level = slog.LevelInfo
	case warn:
		level = slog.LevelWarn
	case errs:
		level = slog.LevelError
	}
	a.LogLevel.Set(level)
	return nil
}

func (a *API) v2Logging(ctx *fasthttp.RequestCtx, _ frontend.Params) {
	if string(ctx.Method()) == "POST" {
		var s LogSettings
		dec := json.NewDecoder(bytes.NewReader(ctx.PostBody()))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&s); err != nil {
			WriteError(ctx, 400, fmt.Sprintf("malformed log settings: %v", err))
			return
		}
		if err := a.SetLogSettings(s); err != nil {
			v2APIError(ctx, err)
			return
		}
	}
	writeCompactJSON(ctx, a.LogSettings())
}
