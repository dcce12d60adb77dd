package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/torchd/torchd/archive"
)

// TorchServe's config.properties (torchd serve --ts-config FILE), the file KServe's `pytorch`
// storage layout carries in config/ beside model-store/. It is read once, into torchd's own
// settings, as a layer below torchd.toml, the environment and the flags; with
// enable_envvars_config=true, TorchServe's TS_<KEY> variables override its keys, as
// TorchServe reads them. Keys torchd has no use for are logged once at start, by name; a
// value torchd cannot take is an error that names the file and the key.

// TorchServeConfig is what a config.properties adds beyond torchd's settings.
type TorchServeConfig struct {
	Path string
	// Models are the model versions model_snapshot loads at start.
	Models []TorchServeModel
	// PerModelSettings are the models key's, by model name and archive version.
	PerModelSettings map[string]map[string]archive.Settings
	// MetricsLog, with metrics_mode=log, is the ts_metrics.log TorchServe's frontend metrics
	// are written to as well, in its log form ("": none).
	MetricsLog string
	// Ignored are the keys torchd does not use, with why.
	Ignored []IgnoredKey
}

// TorchServeModel is one model version of a model_snapshot.
type TorchServeModel struct {
	Name     string
	Version  string // the snapshot's key; the archive's own version is the one registered
	MarName  string // the archive, in the model store
	Default  bool
	Settings archive.Settings
}

// IgnoredKey is a config.properties key that torchd reads and does not use.
type IgnoredKey struct{ Key, Why string }

// tsIgnored are TorchServe keys with no counterpart in torchd, and why.
var tsIgnored = map[string]string{
	"number_of_netty_threads":  "fasthttp's goroutines serve connections",
	"netty_client_threads":     "fasthttp's goroutines serve connections",
	"async_logging":            "torchd's log is written by log/slog",
	"vmargs":                   "torchd runs no JVM",
	"number_of_gpu":            "models choose their device with the device setting",
	"default_service_handler":  "the archive names its handler",
	"service_envelope":         "torchd serves KServe's v1 and v2 natively, on the inference address, and hands a Python handler what TorchServe's envelopes hand it",
	"enable_grpc_ssl":          "gRPC uses TLS when certificate_file and private_key_file are set",
	"cors_allowed_origin":      "see management_allowed_origins",
	"cors_allowed_methods":     "see management_allowed_origins",
	"cors_allowed_headers":     "see management_allowed_origins",
	"decode_input_request":     "a handler process decodes as TorchServe's worker does",
	"max_response_size":        "responses are not capped",
	"disable_system_metrics":   "the host metrics are computed when scraped",
	"metric_time_interval":     "the host metrics are computed when scraped",
	"workflow_store":           "torchd has no workflows",
	"enable_model_api":         "the management API registers models; restrict it with allowed_urls and enable_token_authorization",
	"token_expiration_min":     "torchd's keys do not expire",
	"keystore":                 "torchd reads PEM files: certificate_file and private_key_file",
	"keystore_pass":            "torchd reads PEM files: certificate_file and private_key_file",
	"keystore_type":            "torchd reads PEM files: certificate_file and private_key_file",
	"ipex_enable":              "torchd runs LibTorch without IPEX",
	"cpu_launcher_enable":      "torchd shares the cores among its workers itself",
	"cpu_launcher_args":        "torchd shares the cores among its workers itself",
	"use_native_io":            "torchd runs no JVM",
	"io_ratio":                 "torchd runs no JVM",
	"prefer_direct_buffer":     "torchd runs no JVM",
	"initial_worker_port":      "handler processes talk over Unix sockets",
	"limit_max_image_pixels":   "handler processes keep PIL's limit on",
	"blacklist_env_vars":       "torchd reads only the TS_ variables of keys it maps",
	"unregister_model_timeout": "an unregistration waits for the requests in flight",
	"model_server_home":        "torchd runs no JVM",
}

// tsSettings are the keys that set a torchd setting of the same meaning: the TorchServe key,
// then the torchd key.
var tsSettings = map[string]string{
	"model_store":               "model_store",
	"allowed_urls":              "allowed_urls",
	"max_request_size":          "max_request_size",
	"certificate_file":          "certificate_file",
	"private_key_file":          "private_key_file",
	"enable_metrics_api":        "enable_metrics_api",
	"default_workers_per_model": "workers",
	"job_queue_size":            "job_queue_size",
	"default_response_timeout":  "response_timeout",
	"default_startup_timeout":   "startup_timeout",
	"install_py_dep_per_model":  "install_py_dep_per_model",
	"metrics_config":            "metrics_config",
	"model_metrics_auto_detect": "model_metrics_auto_detect",
}

// ReadTorchServeConfig reads a config.properties into c. getenv supplies TorchServe's TS_*
// variables when the file sets enable_envvars_config=true, and METRICS_LOCATION for metrics_mode=log.
func (c *Config) ReadTorchServeConfig(path string, getenv func(string) string) error {
	f, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("ts-config %s: %v", path, cleanPathErr(err))
	}
	props, err := parseProperties(string(f))
	if err != nil {
		return fmt.Errorf("ts-config %s: %v", path, err)
	}
	if b, err := parseBool(props["enable_envvars_config"]); err == nil && b {
		// As TorchServe's ConfigManager: TS_FOO_BAR sets foo_bar. Only the keys torchd reads
		// are looked up; TorchServe's others would be ignored anyway.
		for _, k := range tsKnownKeys() {
			if v := getenv("TS_" + strings.ToUpper(k)); v != "" {
				props[k] = v
			}
		}
	}
	ts := &TorchServeConfig{Path: path}
	keys := make([]string, 0, len(props))
	for k := range props {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	src := func(k string) string { return fmt.Sprintf("ts-config %s: key %s", path, k) }
	set := func(torchdKey, tsKey, v string) error {
		for _, s := range settings {
			if s.key == torchdKey {
				return c.set(s, v, src(tsKey))
			}
		}
		panic("no torchd setting " + torchdKey)
	}
	tlsWanted := false
	grpc := map[string]string{}
	for _, k := range keys {
		v := strings.TrimSpace(props[k])
		switch k {
		case "inference_address", "management_address", "metrics_address":
			addr, https, err := tsAddress(v)
			if err != nil {
				return fmt.Errorf("%s: %v", src(k), err)
			}
			tlsWanted = tlsWanted || https
			if err := set(k, k, addr); err != nil {
				return err
			}
		case "grpc_inference_port", "grpc_management_port":
			if n, err := strconv.Atoi(v); err != nil || n < 0 || n > 65535 {
				return fmt.Errorf("%s: want a port number, got %q", src(k), v)
			}
			grpc[k] = v
		case "grpc_inference_address", "grpc_management_address":
			grpc[k] = v
		case "load_models":
			if _, snap := props["model_snapshot"]; snap {
				ts.Ignored = append(ts.Ignored, IgnoredKey{k, "model_snapshot names the models loaded at start, as in TorchServe"})
				continue
			}
			if err := set("models", k, tsLoadModels(v)); err != nil {
				return err
			}
		case "model_snapshot":
			models, ignored, err := parseModelSnapshot(v)
			if err != nil {
				return fmt.Errorf("%s: %v", src(k), err)
			}
			ts.Models = models
			ts.Ignored = append(ts.Ignored, ignored...)
		case "models":
			per, ignored, err := parseModelsKey(v)
			if err != nil {
				return fmt.Errorf("%s: %v", src(k), err)
			}
			ts.PerModelSettings = per
			ts.Ignored = append(ts.Ignored, ignored...)
		case "metrics_mode", "metrics_format":
			switch strings.ToLower(v) {
			case "prometheus":
			case "log":
				ts.MetricsLog = tsMetricsLogPath(getenv)
			default:
				return fmt.Errorf("%s: want prometheus or log, got %q", src(k), v)
			}
		case "disable_token_authorization":
			b, err := parseBool(v)
			if err != nil {
				return fmt.Errorf("%s: %v", src(k), err)
			}
			if err := set("enable_token_authorization", k, strconv.FormatBool(!b)); err != nil {
				return err
			}
		default:
			if torchdKey, ok := tsSettings[k]; ok {
				if err := set(torchdKey, k, v); err != nil {
					return err
				}
				continue
			}
			if k == "enable_envvars_config" {
				continue // read above
			}
			why, known := tsIgnored[k]
			if !known {
				why = "not a key torchd knows"
			}
			ts.Ignored = append(ts.Ignored, IgnoredKey{k, why})
		}
	}
	for _, api := range []string{"inference", "management"} {
		host, port := grpc["grpc_"+api+"_address"], grpc["grpc_"+api+"_port"]
		if host == "" && port == "" {
			continue
		}
		// TorchServe's defaults: localhost, and 7070 and 7071.
		if host == "" {
			host = "127.0.0.1"
		}
		if port == "" {
			port = map[string]string{"inference": "7070", "management": "7071"}[api]
		}
		if err := set("grpc_"+api+"_address", "grpc_"+api+"_port", net.JoinHostPort(host, port)); err != nil {
			return err
		}
	}
	if tlsWanted && (c.CertificateFile == "" || c.PrivateKeyFile == "") {
		return fmt.Errorf("ts-config %s: an https:// address needs certificate_file and private_key_file (PEM); torchd does not read keystores", path)
	}
	c.TorchServe = ts
	return nil
}

// tsKnownKeys are the config.properties keys torchd maps or knows to ignore.
func tsKnownKeys() []string {
	keys := []string{"inference_address", "management_address", "metrics_address", "grpc_inference_port", "grpc_management_port",
		"grpc_inference_address", "grpc_management_address", "load_models", "model_snapshot", "models", "metrics_mode", "metrics_format",
		"disable_token_authorization"}
	for k := range tsSettings {
		keys = append(keys, k)
	}
	for k := range tsIgnored {
		keys = append(keys, k)
	}
	return keys
}

// parseProperties reads a Java properties file: `key=value`, `key: value` or `key value`
// lines, # and ! comments, and lines continued by a trailing backslash.
func parseProperties(text string) (map[string]string, error) {
	props := map[string]string{}
	lines := strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n")
	for i := 0; i < len(lines); i++ {
		line := strings.TrimLeft(lines[i], " \t\f")
		if line == "" || line[0] == '#' || line[0] == '!' {
			continue
		}
		for trailingBackslashes(line)%2 == 1 && i+1 < len(lines) {
			i++
			line = line[:len(line)-1] + strings.TrimLeft(lines[i], " \t\f")
		}
		key, value := splitProperty(line)
		k, err := unescapeProperty(key)
		if err != nil {
			return nil, fmt.Errorf("line %d: %v", i+1, err)
		}
		v, err := unescapeProperty(value)
		if err != nil {
			return nil, fmt.Errorf("line %d: key %s: %v", i+1, k, err)
		}
		props[k] = v
	}
	return props, nil
}

func trailingBackslashes(s string) int {
	n := 0
	for n < len(s) && s[len(s)-1-n] == '\\' {
		n++
	}
	return n
}

// splitProperty splits a line at its first unescaped '=', ':' or blank; blanks around the
// separator are not part of the key or the value.
func splitProperty(line string) (key, value string) {
	end := len(line)
	for j := 0; j < len(line); j++ {
		if line[j] == '\\' {
			j++
			continue
		}
		if strings.IndexByte("=: \t\f", line[j]) >= 0 {
			end = j
			break
		}
	}
	key, rest := line[:end], strings.TrimLeft(line[end:], " \t\f")
	if rest != "" && (rest[0] == '=' || rest[0] == ':') {
		rest = strings.TrimLeft(rest[1:], " \t\f")
	}
	return key, rest
}

func unescapeProperty(s string) (string, error) {
	if !strings.Contains(s, `\`) {
		return s, nil
	}
	var b strings.Builder
	for j := 0; j < len(s); j++ {
		if s[j] != '\\' || j+1 == len(s) {
			b.WriteByte(s[j])
			continue
		}
		j++
		switch s[j] {
		case 't':
			b.WriteByte('\t')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 'f':
			b.WriteByte('\f')
		case 'u':
			if j+5 > len(s) {
				return "", errors.New(`malformed \uxxxx escape`)
			}
			r, err := strconv.ParseUint(s[j+1:j+5], 16, 16)
			if err != nil {
				return "", errors.New(`malformed \uxxxx escape`)
			}
			b.WriteRune(rune(r))
			j += 4
		default:
			b.WriteByte(s[j])
		}
	}
	return b.String(), nil
}

// tsAddress turns TorchServe's http://host:port into torchd's host:port, and says whether it
// was https. A port left out is the scheme's, as TorchServe takes it.
func tsAddress(v string) (addr string, https bool, err error) {
	u, perr := url.Parse(v)
	if perr != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
		return "", false, fmt.Errorf("want http://host:port or https://host:port, got %q", v)
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	return net.JoinHostPort(u.Hostname(), port), u.Scheme == "https", nil
}

// tsLoadModels is load_models as torchd's models setting: "all", or name=file.mar and
// file.mar entries. TorchServe's "standalone" loads nothing.
func tsLoadModels(v string) string {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "standalone", "none":
		return ""
	case "all":
		return "all"
	}
	return v
}

// parseModelSnapshot reads model_snapshot's JSON, as TorchServe writes it:
// {"name":…,"modelCount":N,"models":{"NAME":{"VERSION":{"defaultVersion":true,"marName":"x.mar",
// "minWorkers":1,"maxWorkers":5,"batchSize":1,"maxBatchDelay":100,"responseTimeout":120}}}}.
func parseModelSnapshot(v string) ([]TorchServeModel, []IgnoredKey, error) {
	var snap struct {
		Models map[string]map[string]map[string]json.RawMessage `json:"models"`
	}
	if err := json.Unmarshal([]byte(v), &snap); err != nil {
		return nil, nil, fmt.Errorf("not the JSON of a TorchServe snapshot: %v", err)
	}
	models, ignored, err := parseModelVersions(snap.Models, "model_snapshot")
	if err != nil {
		return nil, nil, err
	}
	for _, m := range models {
		if m.MarName == "" {
			return nil, nil, fmt.Errorf("model %s version %s: no marName", m.Name, m.Version)
		}
	}
	return models, ignored, nil
}

// parseModelsKey reads the models key: per-model settings in model_snapshot's form,
// {"NAME":{"VERSION":{"minWorkers":1,"batchSize":4,…}}}, which TorchServe applies to the
// version of that name and archive version when it is created. As there, marName and
// defaultVersion are not read: load_models names the archives.
func parseModelsKey(v string) (map[string]map[string]archive.Settings, []IgnoredKey, error) {
	var raw map[string]map[string]map[string]json.RawMessage
	if err := json.Unmarshal([]byte(v), &raw); err != nil {
		return nil, nil, fmt.Errorf(`want {"model":{"version":{"batchSize":4,…}}} in JSON: %v`, err)
	}
	models, ignored, err := parseModelVersions(raw, "models")
	if err != nil {
		return nil, nil, err
	}
	out := map[string]map[string]archive.Settings{}
	why := map[string]bool{}
	for _, m := range models {
		if out[m.Name] == nil {
			out[m.Name] = map[string]archive.Settings{}
		}
		out[m.Name][m.Version] = m.Settings
		if m.MarName != "" {
			why["models: marName"] = true
		}
		if m.Default {
			why["models: defaultVersion"] = true
		}
	}
	for _, k := range sortedKeys(why) {
		ignored = append(ignored, IgnoredKey{k, "load_models names the archives and set-default the default version, as in TorchServe"})
	}
	return out, ignored, nil
}

// parseModelVersions reads the per-model settings that model_snapshot and the models key
// share, {"NAME":{"VERSION":{field:value}}}, through archive.Settings.Set and its limits.
// from names the key in the fields it reports as not used.
func parseModelVersions(all map[string]map[string]map[string]json.RawMessage, from string) ([]TorchServeModel, []IgnoredKey, error) {
	var models []TorchServeModel
	ignored := map[string]bool{}
	for _, name := range sortedKeys(all) {
		for _, ver := range sortedKeys(all[name]) {
			m := TorchServeModel{Name: name, Version: ver}
			fields := all[name][ver]
			where := fmt.Sprintf("model %s version %s", name, ver)
			for _, key := range sortedKeys(fields) {
				raw := fields[key]
				switch key {
				case "marName":
					if err := json.Unmarshal(raw, &m.MarName); err != nil || m.MarName == "" {
						return nil, nil, fmt.Errorf("%s: marName: want the archive's file name, got %s", where, raw)
					}
				case "defaultVersion":
					if err := json.Unmarshal(raw, &m.Default); err != nil {
						return nil, nil, fmt.Errorf("%s: defaultVersion: want true or false, got %s", where, raw)
					}
				default:
					setting, ok := snapshotSettings[key]
					if !ok {
						ignored[from+": "+key] = true
						continue
					}
					var n int64
					if err := json.Unmarshal(raw, &n); err != nil {
						return nil, nil, fmt.Errorf("%s: %s: want an integer, got %s", where, key, raw)
					}
					if n == 0 && setting == "max_workers" {
						continue // TorchServe's 0: not given
					}
					// The limits every source of settings shares (archive.SettingLimits).
					if err := m.Settings.Set(setting, n); err != nil {
						return nil, nil, fmt.Errorf("%s: %s: %v", where, key, err)
					}
				}
			}
			models = append(models, m)
		}
	}
	var out []IgnoredKey
	for _, k := range sortedKeys(ignored) {
		out = append(out, IgnoredKey{k, "not a per-model setting torchd takes"})
	}
	return models, out, nil
}

// PerModel is the models key's settings of one version (core.Options.PerModel): its workers
// only for a start-up model, as TorchServe applies them only to load_models.
func (ts *TorchServeConfig) PerModel(name, version string, startup bool) archive.Settings {
	if ts == nil {
		return archive.Settings{}
	}
	s := ts.PerModelSettings[name][version]
	if !startup {
		s.MinWorkers, s.MaxWorkers = archive.Tunable[int]{}, archive.Value[int]{}
	}
	return s
}

// snapshotSettings are the model_snapshot fields torchd takes, by their torchd setting; the
// numbers are in the setting's unit (maxBatchDelay in ms, the timeouts in s), as TorchServe's.
var snapshotSettings = map[string]string{
	"minWorkers": "min_workers", "maxWorkers": "max_workers", "batchSize": "batch_size",
	"maxBatchDelay": "max_batch_delay", "responseTimeout": "response_timeout", "startupTimeout": "startup_timeout",
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func cleanPathErr(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		if os.IsNotExist(err) {
			return errors.New("no such file")
		}
		return errors.New(pe.Err.Error())
	}
	return err
}

// tsMetricsLogPath is where TorchServe writes ts_metrics.log: $METRICS_LOCATION, else logs/
// in the working directory.
func tsMetricsLogPath(getenv func(string) string) string {
	dir := getenv("METRICS_LOCATION")
	if dir == "" {
		dir = "logs"
	}
	return filepath.Join(dir, "ts_metrics.log")
}

// openTSMetricsLog opens ts_metrics.log for appending, making its directory.
func openTSMetricsLog(path string) (*os.File, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("%s: %v", path, cleanPathErr(err))
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", path, cleanPathErr(err))
	}
	return f, nil
}
