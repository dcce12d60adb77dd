package daemon

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/internal/tracing"
)

// Config is torchd's server configuration. It is read once, at start-up, by LoadConfig, from
// (highest first) flags, the environment, torchd.toml and the defaults in settings below.
type Config struct {
	InferenceAddress  string
	ManagementAddress string
	MetricsAddress    string
	// The gRPC front-ends, each on its own port (grpc.go); "" turns one off.
	GRPCAddress           string // the Open Inference Protocol (Triton's inference.GRPCInferenceService)
	GRPCInferenceAddress  string // TorchServe's gRPC inference API
	GRPCManagementAddress string // TorchServe's gRPC management API
	GRPCMaxMessageSize    int    // largest gRPC message received or sent; 0: MaxRequestSize
	GRPCKeepaliveTime     time.Duration
	GRPCKeepaliveTimeout  time.Duration
	ModelStore            string
	Models                string // "", "all", or "name=archive,..." loaded at start
	MaxRequestSize        int
	AllowedURLs           []string // regexps a registration URL must match; empty: the model store only
	MaxDownloadSize       int64
	DownloadTimeout       time.Duration
	ReadTimeout           time.Duration
	WriteTimeout          time.Duration
	IdleTimeout           time.Duration
	ShutdownTimeout       time.Duration
	Profile               string // cpu|mem|block|mutex, written through pkg/profile
	ProfilePath           string
	LogFormat             string // text|json
	LogLevel              slog.Level
	AccessLog             bool
	EnableMetrics         bool
	CacheDir              string
	Python                string // handler processes' interpreter; "": see PythonPath
	InstallPyDeps         bool   // pip install archives' requirements.txt for their handler processes
	HandlerMemoryMiB      int    // each handler process's RSS bound; 0: none
	ONNXMemoryMiB         int    // what ONNX models' runs may allocate together; 0: none, -1: auto
	MetricsConfig         string // TorchServe's metrics.yaml: the handlers' context.metrics and their series
	MetricsAutoDetect     bool   // serve handlers' metrics that MetricsConfig does not declare
	HandlerForkServer     bool   // fork handler processes from a warm parent per runtime
	InitialWorkers        int    // workers a management-API registration starts by default; 0, as TorchServe
	TokenAuth             bool
	EnableSnapshots       bool
	SnapshotFile          string
	CertificateFile       string
	PrivateKeyFile        string
	KeyFile               string
	EnableUI              bool     // the web page on the inference port (frontend/webui)
	BatchDelayAlone       bool     // a request alone in its model waits max_batch_delay (core.Options.DispatchAlone's inverse)
	KeepFreedMemory       bool     // torch.KeepFreedMemory at start
	KeepFreedMemoryMB     int      // the most freed C memory kept under load, MiB; 0: no cap
	ManagementOrigins     []string // browser origins allowed to call the management API (CORS); empty: none

	// A Triton model repository (package lifecycle serves it): its directory ("" for none), the model
	// control mode (none, explicit or poll), the models loaded at start in explicit mode
	// ("*": all), and how often poll mode reads the repository.
	ModelRepository    string
	ModelControlMode   string
	LoadModels         []string
	RepositoryPollSecs time.Duration

	// Tracing is OpenTelemetry tracing's settings (the trace_* keys, which read the standard
	// OTEL_* variables); internal/tracing checks them at start, and warns of what it cannot use.
	Tracing tracing.Config

	// TorchServe is what a TorchServe config.properties (--ts-config) adds: the models of its
	// model_snapshot and the keys torchd does not use (tsconfig.go); nil without one.
	TorchServe *TorchServeConfig

	// Model are the per-model settings that the file, the environment or the flags set, for
	// every model: they beat an archive's own config, and a registration's parameters beat
	// them (core.Resolve). The built-in defaults, below the archive's, are ModelDefaults.
	Model archive.Settings

	// How long an idle handler fork server stays; 0: while torchd runs.
	HandlerForkLinger time.Duration
}

// ModelSettings are a model version's resolved serving settings (core.Resolve).
type ModelSettings = core.ModelSettings

// setting is one configuration key: its name in torchd.toml, its environment variables
// (the first wins), its flag, its default and how it is applied.
type setting struct {
	key   string
	env   []string
	def   string
	help  string
	apply func(c *Config, v string) error
	model bool // a per-model setting, applied to Config.Model
	// repeat: the flag may be given several times, its values joined with commas.
	repeat bool
}

// Each parser reads a setting's text into its value, or says what it wants.

func parseInt(min int) func(string) (int, error) {
	return func(v string) (int, error) {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < min {
			return 0, fmt.Errorf("want an integer ≥ %d, got %q", min, v)
		}
		return n, nil
	}
}

// parseAutoInt is an integer ≥ 0, or "auto" as -1.
func parseAutoInt(v string) (int, error) {
	if strings.TrimSpace(v) == "auto" {
		return -1, nil
	}
	n, err := parseInt(0)(v)
	if err != nil {
		err = fmt.Errorf(`%v, or "auto"`, err)
	}
	return n, err
}

func parseDur(unit time.Duration) func(string) (time.Duration, error) {
	return func(v string) (time.Duration, error) {
		v = strings.TrimSpace(v)
		if d, err := time.ParseDuration(v); err == nil && d >= 0 {
			return d, nil
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < 0 {
			return 0, fmt.Errorf("want a non-negative number of %v or a duration like 250ms, got %q", unit, v)
		}
		return time.Duration(f * float64(unit)), nil
	}
}

func parseStr(allowed ...string) func(string) (string, error) {
	return func(v string) (string, error) {
		if len(allowed) > 0 && !contains(allowed, v) {
			return "", fmt.Errorf("want one of %s, got %q", strings.Join(allowed, ", "), v)
		}
		return v, nil
	}
}

func parseBool(v string) (bool, error) {
	b, err := strconv.ParseBool(strings.TrimSpace(v))
	if err != nil {
		return false, fmt.Errorf("want true or false, got %q", v)
	}
	return b, nil
}

func parseDevice(v string) (string, error) {
	if v != "cpu" && v != "cuda" && !strings.HasPrefix(v, "cuda:") {
		return "", fmt.Errorf("want cpu, cuda or cuda:N, got %q", v)
	}
	return v, nil
}

// field applies a server setting: its parsed value goes to dst.
func field[T any](dst func(*Config) *T, parse func(string) (T, error)) func(*Config, string) error {
	return func(c *Config, v string) error {
		x, err := parse(v)
		if err == nil {
			*dst(c) = x
		}
		return err
	}
}

func intSetting(dst func(*Config) *int, min int) func(*Config, string) error {
	return field(dst, parseInt(min))
}

func durSetting(dst func(*Config) *time.Duration, unit time.Duration) func(*Config, string) error {
	return field(dst, parseDur(unit))
}

func strSetting(dst func(*Config) *string, allowed ...string) func(*Config, string) error {
	return field(dst, parseStr(allowed...))
}

func boolSetting(dst func(*Config) *bool) func(*Config, string) error {
	return field(dst, parseBool)
}

// modelSetting applies a per-model setting to Config.Model through archive.Settings.Set, the
// setter (and limits) every source of per-model settings shares. key is torchd's name for it
// (workers is min_workers). A number is a count, or of the setting's unit (ms, s) or a
// duration like 250ms; with zeroUnset, 0 (the setting's default) is not given, so that an
// archive's value stands.
func modelSetting(key string, zeroUnset bool) func(*Config, string) error {
	l := archive.SettingLimits[key]
	return func(c *Config, v string) error {
		v = strings.TrimSpace(v)
		var x any
		var err error
		switch {
		case l.Auto && v == "auto":
			x = v
		case l.Unit != 0:
			x, err = parseDur(l.Unit)(v)
		default:
			lo := l.Min
			if zeroUnset {
				lo = 0
			}
			x, err = strconv.Atoi(v)
			if err != nil {
				err = fmt.Errorf("want an integer ≥ %d, got %q", lo, v)
			}
		}
		if err == nil && zeroUnset && (x == 0 || x == time.Duration(0)) {
			c.Model.Unset(key) // over a lower source's value (the file's, under a flag)
			return nil
		}
		if err == nil {
			err = c.Model.Set(key, x)
		}
		var re *archive.RangeError
		if errors.As(err, &re) {
			err = fmt.Errorf("want an integer ≥ %d and ≤ %d, got %q", re.Min, re.Max, v)
			if l.Unit != 0 {
				unit := map[time.Duration]string{time.Millisecond: "ms", time.Second: "s"}[l.Unit]
				err = fmt.Errorf("want %d to %d %s, or a duration in that range, got %q", re.Min, re.Max, unit, v)
			}
		}
		if err != nil && l.Auto {
			err = fmt.Errorf(`%v, or "auto"`, err)
		}
		return err
	}
}

// modelValue applies a per-model setting that is not a number through archive.Settings.Set.
func modelValue[T any](key string, parse func(string) (T, error)) func(*Config, string) error {
	return func(c *Config, v string) error {
		x, err := parse(v)
		if err != nil {
			return err
		}
		return c.Model.Set(key, x)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// settings is the one list of every configuration key. docs/guide/configuration.md's table
// is generated from it (go generate ./daemon/), and TestConfigurationDoc keeps the two in step.
var settings = []setting{
	{key: "inference_address", def: "127.0.0.1:8080", help: "inference API (TorchServe and KServe protocols)",
		apply: strSetting(func(c *Config) *string { return &c.InferenceAddress })},
	{key: "management_address", def: "127.0.0.1:8081", help: "management API; localhost by default, as TorchServe",
		apply: strSetting(func(c *Config) *string { return &c.ManagementAddress })},
	{key: "metrics_address", def: "127.0.0.1:8082", help: "Prometheus metrics",
		apply: strSetting(func(c *Config) *string { return &c.MetricsAddress })},
	{key: "grpc_address", def: "127.0.0.1:8001", help: `Open Inference Protocol over gRPC (Triton's inference.GRPCInferenceService, with grpc.health.v1); "" turns it off`,
		apply: strSetting(func(c *Config) *string { return &c.GRPCAddress })},
	{key: "grpc_inference_address", def: "127.0.0.1:7070", help: `TorchServe's gRPC inference API; "" turns it off`,
		apply: strSetting(func(c *Config) *string { return &c.GRPCInferenceAddress })},
	{key: "grpc_management_address", def: "127.0.0.1:7071", help: `TorchServe's gRPC management API; localhost by default; "" turns it off`,
		apply: strSetting(func(c *Config) *string { return &c.GRPCManagementAddress })},
	{key: "grpc_max_message_size", def: "0", help: "largest gRPC message received or sent, in bytes (RESOURCE_EXHAUSTED above it); 0: max_request_size",
		apply: intSetting(func(c *Config) *int { return &c.GRPCMaxMessageSize }, 0)},
	{key: "grpc_keepalive_time", def: "7200", help: "seconds a gRPC connection may be idle before the server pings it (Triton's default)",
		apply: durSetting(func(c *Config) *time.Duration { return &c.GRPCKeepaliveTime }, time.Second)},
	{key: "grpc_keepalive_timeout", def: "20", help: "seconds the server waits for a keepalive ping's answer before closing the connection",
		apply: durSetting(func(c *Config) *time.Duration { return &c.GRPCKeepaliveTimeout }, time.Second)},
	{key: "model_store", def: "model-store", help: "directory of model archives",
		apply: strSetting(func(c *Config) *string { return &c.ModelStore })},
	{key: "models", def: "", help: `models loaded at start: "all", or name=archive,... (archives in the model store)`,
		apply: strSetting(func(c *Config) *string { return &c.Models })},
	{key: "max_request_size", def: "6553500", help: "largest request body in bytes (413 above it)",
		apply: intSetting(func(c *Config) *int { return &c.MaxRequestSize }, 1)},
	{key: "allowed_urls", def: "", help: "comma-separated regexps that registration URLs may match; empty: the model store only",
		apply: func(c *Config, v string) error { c.AllowedURLs = splitList(v); return nil }},
	{key: "max_download_size", def: "4294967296", help: "largest archive a registration by http(s) URL may download, in bytes",
		apply: func(c *Config, v string) error {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil || n < 1 {
				return fmt.Errorf("want a positive number of bytes, got %q", v)
			}
			c.MaxDownloadSize = n
			return nil
		}},
	{key: "download_timeout", def: "10m", help: "time a registration by http(s) URL may spend downloading",
		apply: durSetting(func(c *Config) *time.Duration { return &c.DownloadTimeout }, time.Second)},
	{key: "read_timeout", def: "60s", help: "time to read a whole request, headers and body",
		apply: durSetting(func(c *Config) *time.Duration { return &c.ReadTimeout }, time.Second)},
	{key: "write_timeout", def: "180s", help: "time to write a response",
		apply: durSetting(func(c *Config) *time.Duration { return &c.WriteTimeout }, time.Second)},
	{key: "idle_timeout", def: "120s", help: "keep-alive connection idle time",
		apply: durSetting(func(c *Config) *time.Duration { return &c.IdleTimeout }, time.Second)},
	{key: "shutdown_timeout", def: "30s", help: "how long a graceful stop waits for accepted requests",
		apply: durSetting(func(c *Config) *time.Duration { return &c.ShutdownTimeout }, time.Second)},
	{key: "enable_metrics_api", def: "true", help: "serve metrics on metrics_address; false also skips every metric update on the request path",
		apply: boolSetting(func(c *Config) *bool { return &c.EnableMetrics })},
	{key: "enable_token_authorization", def: "false", help: "require Authorization: Bearer keys from key_file on the inference and management APIs",
		apply: boolSetting(func(c *Config) *bool { return &c.TokenAuth })},
	{key: "key_file", def: "key_file.json", help: "the keys (management, inference, API); created with random keys if absent",
		apply: strSetting(func(c *Config) *string { return &c.KeyFile })},
	{key: "certificate_file", def: "", help: "PEM certificate: with private_key_file, all three APIs serve HTTPS only",
		apply: strSetting(func(c *Config) *string { return &c.CertificateFile })},
	{key: "private_key_file", def: "", help: "PEM private key of certificate_file",
		apply: strSetting(func(c *Config) *string { return &c.PrivateKeyFile })},
	{key: "enable_snapshots", def: "true", help: "record API-registered models in snapshot_file and register them again at start-up",
		apply: boolSetting(func(c *Config) *bool { return &c.EnableSnapshots })},
	{key: "snapshot_file", def: "torchd-snapshot.json", help: "where the snapshot of API registrations lives",
		apply: strSetting(func(c *Config) *string { return &c.SnapshotFile })},
	{key: "profile", def: "", help: "write a pprof profile on exit: cpu, mem, block or mutex",
		apply: strSetting(func(c *Config) *string { return &c.Profile }, "", "cpu", "mem", "block", "mutex")},
	{key: "profile_path", def: ".", help: "directory for --profile output",
		apply: strSetting(func(c *Config) *string { return &c.ProfilePath })},
	{key: "log_level", def: "info", help: "debug, info, warn or error; debug adds the auto-batching tuner's windows and declined probes",
		apply: func(c *Config, v string) error { return c.LogLevel.UnmarshalText([]byte(strings.TrimSpace(v))) }},
	{key: "log_format", def: "text", help: "text or json (log/slog)",
		apply: strSetting(func(c *Config) *string { return &c.LogFormat }, "text", "json")},
	{key: "access_log", def: "true", help: "one log line per request: method, path, status, latency",
		apply: boolSetting(func(c *Config) *bool { return &c.AccessLog })},
	{key: "enable_ui", def: "true", help: "serve the web page on the inference port at / (browsers) and /ui/",
		apply: boolSetting(func(c *Config) *bool { return &c.EnableUI })},
	{key: "keep_freed_memory", def: "true", help: "make the C allocator keep the memory LibTorch frees (glibc: no mmap'd blocks, no heap trimming), so forwards reuse their activations' pages instead of faulting in fresh ones; process-wide, at start. Under load the resident size stays near its peak (see keep_freed_memory_mb); after 30 s without inference requests, when a model's worker has had no batch for 30 s (it frees its staging buffer too), and when a model is unregistered, the free memory of every thread's heap goes back to the operating system",
		apply: boolSetting(func(c *Config) *bool { return &c.KeepFreedMemory })},
	{key: "keep_freed_memory_mb", def: "256", help: "the most freed memory, in MiB, that keep_freed_memory keeps resident under load: past it, the free memory goes back to the operating system (checked every 5 s, estimated as the anonymous resident set less what the C allocator and the Go runtime hold); 0: no cap. Once the server is idle, all of it goes back",
		apply: intSetting(func(c *Config) *int { return &c.KeepFreedMemoryMB }, 0)},
	{key: "management_allowed_origins", def: "", help: "comma-separated browser origins (scheme://host:port) that may call the management API (CORS), so the web page can show management actions; empty: none",
		apply: func(c *Config, v string) error { c.ManagementOrigins = splitList(v); return nil }},

	{key: "trace_exporter", env: []string{"OTEL_TRACES_EXPORTER"}, def: "none", help: "OpenTelemetry tracing of inference requests (docs/guide/tracing.md): otlp, console (spans on stdout) or none (off); a value torchd cannot use is a warning and tracing stays off",
		apply: strSetting(func(c *Config) *string { return &c.Tracing.Exporter })},
	{key: "trace_endpoint", env: []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"}, def: "", help: "the OTLP endpoint URL that spans go to (http://collector:4318/v1/traces; http://collector:4317 with trace_protocol grpc); empty: OTEL_EXPORTER_OTLP_ENDPOINT as the OpenTelemetry SDK reads it, else localhost",
		apply: strSetting(func(c *Config) *string { return &c.Tracing.Endpoint })},
	{key: "trace_protocol", env: []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"}, def: "http/protobuf", help: "OTLP over http/protobuf or grpc",
		apply: strSetting(func(c *Config) *string { return &c.Tracing.Protocol })},
	{key: "trace_sampler", env: []string{"OTEL_TRACES_SAMPLER"}, def: "parentbased_traceidratio", help: "which requests are traced: a request whose caller sent a trace context follows its sampled flag (parentbased_*), the rest are traced at trace_sampler_arg's ratio; also always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off",
		apply: strSetting(func(c *Config) *string { return &c.Tracing.Sampler })},
	{key: "trace_sampler_arg", env: []string{"OTEL_TRACES_SAMPLER_ARG"}, def: "1.0", help: "the ratio, 0 to 1, of the traceidratio samplers",
		apply: strSetting(func(c *Config) *string { return &c.Tracing.SamplerArg })},
	{key: "trace_service_name", env: []string{"OTEL_SERVICE_NAME"}, def: "torchd", help: "service.name of the spans (OTEL_RESOURCE_ATTRIBUTES adds to the resource)",
		apply: strSetting(func(c *Config) *string { return &c.Tracing.ServiceName })},
	{key: "trace_propagators", env: []string{"OTEL_PROPAGATORS"}, def: "tracecontext,baggage,b3", help: "the trace context formats read from a request's headers or gRPC metadata: tracecontext (W3C traceparent, tracestate), baggage, b3 and b3multi (each reads both B3 forms), none",
		apply: strSetting(func(c *Config) *string { return &c.Tracing.Propagators })},

	{key: "model_repository", def: "", help: "a Triton model repository (<model>/config.pbtxt, <model>/<version>/model.pt or model.pt2) to serve; see docs/guide/triton.md",
		apply: strSetting(func(c *Config) *string { return &c.ModelRepository })},
	{key: "model_control_mode", def: "none", help: "Triton's: none (load every repository model at start; the repository API loads and unloads nothing), explicit (load_model at start, then the repository API, over REST and gRPC, with the management key; without a model_repository it loads the model store's archives) or poll (follow the repository's changes)",
		apply: strSetting(func(c *Config) *string { return &c.ModelControlMode }, ControlNone, ControlExplicit, ControlPoll)},
	{key: "load_model", def: "", repeat: true, help: `repository models loaded at start in explicit mode; the flag repeats, "*" is every model`,
		apply: func(c *Config, v string) error { c.LoadModels = splitList(v); return nil }},
	{key: "repository_poll_secs", def: "15", help: "seconds between reads of the repository in poll mode",
		apply: durSetting(func(c *Config) *time.Duration { return &c.RepositoryPollSecs }, time.Second)},

	{key: "batch_size", env: []string{"BATCH_SIZE"}, def: "1", model: true, help: `largest batch per forward, or "auto"`,
		apply: modelSetting("batch_size", false)},
	{key: "max_batch_delay", env: []string{"LINGER_MS"}, def: "100", model: true, help: `ms a batch waits to fill, from its oldest request, or "auto"`,
		apply: modelSetting("max_batch_delay", false)},
	{key: "batch_delay_alone", def: "false", help: "whether a request alone in its model (no other admitted, queued or in a running batch) waits max_batch_delay for company, as TorchServe and Triton wait; false: it is dispatched at once, which saves a lone client the delay on every request (at c=1, max_batch_delay a request) and leaves batches under load as they were; a burst that reaches an idle model may run its first request alone",
		apply: boolSetting(func(c *Config) *bool { return &c.BatchDelayAlone })},
	{key: "workers", env: []string{"WORKERS"}, def: "1", model: true, help: `workers per model (min_workers), or "auto"; each runs batched forwards (on a locked OS thread for LibTorch). A registration through the management API takes it only when it is set (TorchServe's default_workers_per_model), else initial_workers`,
		apply: modelSetting("min_workers", false)},
	{key: "initial_workers", def: "0", help: "workers a registration through TorchServe's management API (REST or gRPC) starts when neither it (initial_workers), the archive nor an explicit workers setting names a count; 0 is TorchServe's default (scale workers up to serve), 1 serves at once",
		apply: intSetting(func(c *Config) *int { return &c.InitialWorkers }, 0)},
	{key: "latency_target_ms", def: "0", model: true, help: "p99 latency objective for auto batching, in ms; 0: none (lowest latency at the offered load)",
		apply: modelSetting("latency_target_ms", true)},
	{key: "cache_dir", def: "", help: "where measured batching curves are cached; empty: the user cache directory/torchd",
		apply: strSetting(func(c *Config) *string { return &c.CacheDir })},
	{key: "python", env: []string{"TORCHD_PYTHON"}, def: "", help: "the Python that runs archives' Python handlers (custom handler.py, eager models, TorchServe's own handlers) and Triton repositories' Python backend models (model.py) in handler processes; it must import TorchServe's ts package (make handler-runtime); empty: the project venv beside the binary (../.venv/bin/python), else python3; off: archives with Python handlers and backend python models are refused",
		apply: strSetting(func(c *Config) *string { return &c.Python })},
	{key: "install_py_dep_per_model", def: "false", help: "pip install an archive's requirements.txt (torch-model-archiver --requirements-file) into a directory of the model's own, first on its handler processes' PYTHONPATH, as TorchServe's install_py_dep_per_model; false: the file is not installed, and the log says so",
		apply: boolSetting(func(c *Config) *bool { return &c.InstallPyDeps })},
	{key: "onnx_memory_limit", def: "auto", help: `MiB that the runs of ONNX models may allocate together (their intermediate tensors and outputs, from one arena; weights are outside it): a run that would go past it fails with "out of memory" and the server goes on, where a graph that sizes a tensor from a request's values (ConstantOfShape, Expand) could otherwise take the machine's memory; "auto": half of what the process may use (its cgroup's memory.max, else the machine's memory); 0: no limit. Once, at start`,
		apply: field(func(c *Config) *int { return &c.ONNXMemoryMiB }, parseAutoInt)},
	{key: "metrics_config", def: "", help: "a TorchServe metrics.yaml (its metrics_config): its model_metrics are the metrics Python handlers' context.metrics knows (get_metric), and are served on the metrics port as TorchServe serves them, labelled by their dimensions and Hostname; empty: TorchServe's default (HandlerTime and PredictionTime, which torchd writes itself)",
		apply: strSetting(func(c *Config) *string { return &c.MetricsConfig })},
	{key: "model_metrics_auto_detect", def: "false", help: "serve a metric a Python handler emits that metrics_config does not declare, as TorchServe's model_metrics_auto_detect; false: such a metric is dropped",
		apply: boolSetting(func(c *Config) *bool { return &c.MetricsAutoDetect })},
	{key: "handler_memory_limit", def: "0", help: "MiB of resident memory each handler process may use: one above it is killed, failing its batch, and restarted; 0: no limit",
		apply: intSetting(func(c *Config) *int { return &c.HandlerMemoryMiB }, 0)},
	{key: "handler_fork_server", def: "true", help: "fork handler processes from one warm process per Python runtime that has imported torch and TorchServe's worker, so that they start in a fraction of the time and share those pages; a process whose archive's requirements were installed, or whose model sets variables read as libraries load, starts apart; false: every process starts its own interpreter",
		apply: boolSetting(func(c *Config) *bool { return &c.HandlerForkServer })},
	{key: "handler_fork_server_linger", def: "10s", help: "how long the fork server stays once it has forked nothing: it then exits, so that its memory, which RSS counts again in every process forked from it, is off torchd's tree, and its processes serve on as torchd's children; the next start (a restart, a scale-up) starts a new one, importing torch again; 0: it stays while torchd runs",
		apply: durSetting(func(c *Config) *time.Duration { return &c.HandlerForkLinger }, time.Second)},
	{key: "max_workers", def: "0", model: true, help: "upper bound for scaling; 0: equal to workers",
		apply: modelSetting("max_workers", true)},
	{key: "job_queue_size", def: "100", model: true, help: "requests queued per model before 503",
		apply: modelSetting("job_queue_size", false)},
	{key: "response_timeout", def: "120", model: true, help: "seconds a request may take once queued (504 after)",
		apply: modelSetting("response_timeout", false)},
	{key: "startup_timeout", def: "120", model: true, help: "seconds a model may take to load and warm up",
		apply: modelSetting("startup_timeout", false)},
	{key: "device", def: "cpu", model: true, help: "cpu, cuda or cuda:N",
		apply: modelValue("device", parseDevice)},
	{key: "threads", def: "0", model: true, help: "intra-op threads of every forward; 0: each forward takes the cores no other forward holds, or an even share of them (all of them alone, cores / workers when every worker runs)",
		apply: modelSetting("threads", true)},
	{key: "forward_batch", def: "0", model: true, help: `the most rows one forward runs: a bigger batch runs as several forwards in turn (a model whose activations outgrow the caches runs faster per row in smaller forwards; OpenVINO models run them on a model compiled for that size, and batches are taken in whole forwards); "auto": the size with the most rows a second, measured at load; 0: the whole batch`,
		apply: modelSetting("forward_batch", true)},
	{key: "freeze", def: "false", model: true, help: "torch.jit.freeze models at load",
		apply: modelValue("freeze", parseBool)},
	{key: "optimize_for_inference", def: "false", model: true, help: "torch.jit.optimize_for_inference TorchScript models at load (freezes them; folds batch norms, oneDNN layouts): faster batched forwards, can be slower at batch 1",
		apply: modelValue("optimize_for_inference", parseBool)},
}

// ModelDefaults are the built-in per-model settings, the lowest layer of every model's
// (core.Resolve): the settings list's defaults, and fp32.
func ModelDefaults() archive.Settings {
	var c Config
	for _, s := range settings {
		if s.model {
			if err := s.apply(&c, s.def); err != nil {
				panic(fmt.Sprintf("default of %s: %v", s.key, err))
			}
		}
	}
	c.Model.Precision = archive.Of("fp32")
	return c.Model
}

func init() {
	for i := range settings {
		s := &settings[i]
		s.env = append(s.env, "TORCHD_"+strings.ToUpper(s.key))
	}
}

func splitList(v string) []string {
	var out []string
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func flagName(key string) string { return strings.ReplaceAll(key, "_", "-") }

// LoadConfig reads the configuration with its precedence, flags > environment > torchd.toml
// (--config or TORCHD_CONFIG, else ./torchd.toml if present) > defaults. Per-model settings
// keep only what was set (Config.Model): their defaults are a layer of their own,
// ModelDefaults, below an archive's config.
func LoadConfig(args []string, getenv func(string) string) (*Config, error) {
	c := &Config{}
	for _, s := range settings {
		if s.model {
			continue
		}
		if err := s.apply(c, s.def); err != nil {
			panic(fmt.Sprintf("default of %s: %v", s.key, err))
		}
	}

	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	configPath := fs.String("config", "", "torchd.toml path (env TORCHD_CONFIG)")
	tsConfig := fs.String("ts-config", "", "a TorchServe config.properties, read below torchd.toml (env TORCHD_TS_CONFIG; docs/guide/migrating-from-torchserve.md)")
	flagVals := map[string]*flagValue{}
	for _, s := range settings {
		v := &flagValue{boolean: s.def == "true" || s.def == "false", repeat: s.repeat}
		flagVals[s.key] = v
		fs.Var(v, flagName(s.key), fmt.Sprintf("%s (env %s, default %q)", s.help, strings.Join(s.env, " or "), s.def))
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	flagsSet := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { flagsSet[f.Name] = true })

	// TorchServe's config.properties is the lowest file layer: torchd.toml, the environment
	// and the flags override what it sets.
	if ts := cmp.Or(*tsConfig, getenv("TORCHD_TS_CONFIG")); ts != "" {
		if err := c.ReadTorchServeConfig(ts, getenv); err != nil {
			return nil, err
		}
	}
	path := *configPath
	if path == "" {
		path = getenv("TORCHD_CONFIG")
	}
	explicit := path != ""
	if path == "" {
		path = "torchd.toml"
	}
	if err := c.applyFile(path, explicit); err != nil {
		return nil, err
	}
	for _, s := range settings {
		for _, e := range s.env {
			if v := getenv(e); v != "" {
				if err := c.set(s, v, "environment variable "+e); err != nil {
					return nil, err
				}
				break
			}
		}
	}
	for _, s := range settings {
		if flagsSet[flagName(s.key)] {
			if err := c.set(s, flagVals[s.key].v, "flag --"+flagName(s.key)); err != nil {
				return nil, err
			}
		}
	}
	if (c.CertificateFile == "") != (c.PrivateKeyFile == "") {
		return nil, fmt.Errorf("TLS needs both certificate_file and private_key_file")
	}
	if err := c.checkRepository(); err != nil {
		return nil, err
	}
	return c, nil
}

// flagValue holds a flag's text until the precedence is applied; boolean settings may be
// given as a bare --flag.
type flagValue struct {
	v       string
	boolean bool
	repeat  bool
	set     bool
}

func (f *flagValue) String() string { return f.v }
func (f *flagValue) Set(v string) error {
	if f.repeat && f.set {
		v = f.v + "," + v
	}
	f.v, f.set = v, true
	return nil
}
func (f *flagValue) IsBoolFlag() bool { return f.boolean }

func (c *Config) set(s setting, v, source string) error {
	if err := s.apply(c, v); err != nil {
		return fmt.Errorf("%s: %v", source, err)
	}
	return nil
}

func (c *Config) applyFile(path string, explicit bool) error {
	raw := map[string]any{}
	md, err := toml.DecodeFile(path, &raw)
	if err != nil {
		if os.IsNotExist(err) && !explicit {
			return nil
		}
		return fmt.Errorf("config %s: %v", path, err)
	}
	keys := md.Keys()
	sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
	for _, k := range keys {
		name := k.String()
		var s *setting
		for i := range settings {
			if settings[i].key == name {
				s = &settings[i]
			}
		}
		if s == nil {
			return fmt.Errorf("config %s: unknown key %q (see `torchd serve -h`)", path, name)
		}
		v := raw[name]
		var str string
		switch x := v.(type) {
		case []any:
			parts := make([]string, len(x))
			for i, p := range x {
				parts[i] = fmt.Sprint(p)
			}
			str = strings.Join(parts, ",")
		default:
			str = fmt.Sprint(x)
		}
		if err := c.set(*s, str, fmt.Sprintf("config %s: key %s", path, name)); err != nil {
			return err
		}
	}
	return nil
}

// checkRepository applies Triton's rules to the repository settings: --load-model only in
// explicit mode, and a poll interval for poll mode. Explicit mode without a repository
// lets the repository API load and unload the model store's archives.
func (c *Config) checkRepository() error {
	switch {
	case c.ModelRepository == "" && (c.ModelControlMode == ControlPoll || len(c.LoadModels) > 0):
		return fmt.Errorf("model_control_mode poll and load_model need model_repository (--model-repository DIR)")
	case len(c.LoadModels) > 0 && c.ModelControlMode != ControlExplicit:
		return fmt.Errorf("load_model is only read with model_control_mode explicit, as in Triton")
	case c.ModelControlMode == ControlPoll && c.RepositoryPollSecs < time.Second/10:
		return fmt.Errorf("repository_poll_secs must be at least 0.1 in poll mode, got %v", c.RepositoryPollSecs)
	}
	return nil
}
