package archive

import (
	"errors"
	"fmt"
	"math"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
	"go.yaml.in/yaml/v3"
)

// ParseModelConfig parses a per-model config file. The extension of name
// picks the format: ".toml" is torchd's model-config.toml, ".yaml" or ".yml"
// TorchServe's model-config.yaml. name is also what errors call the file.
//
// Every problem found is reported, joined, each as a *ConfigError naming the
// file, the key and what is allowed.
func ParseModelConfig(name string, data []byte) (ModelConfig, error) {
	switch strings.ToLower(path.Ext(name)) {
	case ".toml":
		return parseTOML(name, data)
	case ".yaml", ".yml":
		return parseYAML(name, data)
	}
	return ModelConfig{}, configErr(name, "", "unknown config format: want %s or a TorchServe .yaml", ConfigTOML)
}

// tomlKeys are model-config.toml's top-level keys, in the order they are checked.
var tomlKeys = []string{
	"handler", "serialized_file", "batch_size", "max_batch_delay", "min_workers", "max_workers",
	"job_queue_size", "response_timeout", "startup_timeout", "device", "device_ids", "threads",
	"freeze", "optimize_for_inference", "options", "inputs", "outputs", "latency_target_ms", "precision",
	"fp32_modules", "forward_batch", "preferred_batch_size",
}

func parseTOML(file string, data []byte) (ModelConfig, error) {
	// Decoding into a map rather than a struct lets every type error name its
	// key; unknown keys are then the ones no reader asked for, which is what
	// toml.MetaData.Undecoded would report for a struct.
	var raw map[string]any
	if _, err := toml.Decode(string(data), &raw); err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return ModelConfig{}, configErr(file, pe.LastKey, "invalid TOML on line %d: %s", pe.Position.Line, pe.Message)
		}
		return ModelConfig{}, configErr(file, "", "invalid TOML: %v", err)
	}
	c := ModelConfig{File: file}
	f := newFields(file, "", raw)

	if s, ok := f.str("handler"); ok {
		if err := checkHandler(s); err != nil {
			f.errs = append(f.errs, &ConfigError{File: file, Key: "handler", Err: err})
		}
		c.Handler = s
	}
	if s, ok := f.str("serialized_file"); ok {
		if _, err := entryName(s); err != nil {
			f.fail("serialized_file", "%w: %q must be a relative path inside the archive", err, s)
		} else if err := checkSerializedName(s); err != nil {
			f.failErr("serialized_file", err)
		}
		c.SerializedFile = s
	}
	for _, key := range []string{"batch_size", "max_batch_delay", "min_workers", "latency_target_ms",
		"max_workers", "job_queue_size", "response_timeout", "startup_timeout"} {
		f.setting(&c.Settings, key, key)
	}
	if s, ok := f.str("device"); ok {
		if err := checkDevice(s); err != nil {
			f.failErr("device", err)
		}
		c.Device = Of(s)
	}
	if ids, ok := f.ints("device_ids", 0, "GPU indexes >= 0"); ok {
		if c.Device.Set && c.Device.V != "cuda" {
			f.fail("device_ids", `needs device = "cuda" (or no device), not %q`, c.Device.V)
		}
		c.DeviceIDs = toInts(ids)
	}
	f.setting(&c.Settings, "threads", "threads")
	f.setting(&c.Settings, "forward_batch", "forward_batch")
	if sizes, ok := f.ints("preferred_batch_size", 1, "batch sizes >= 1"); ok {
		// A size above batch_size is not refused here: the server's batch_size may be larger
		// than the archive's. The batcher passes over those above the one in use.
		c.PreferredBatchSize = toInts(sizes)
	}
	for _, key := range []string{"freeze", "optimize_for_inference"} {
		if b, ok := f.boolean(key); ok {
			_ = c.Settings.Set(key, b) // a bool is all Set checks
		}
	}
	if s, ok := f.str("precision"); ok {
		if err := c.Settings.Set("precision", s); err != nil {
			f.failErr("precision", err)
		}
	}
	if v, ok := f.get("fp32_modules"); ok {
		list, isList := v.([]any)
		if !isList {
			f.fail("fp32_modules", "must be an array of submodule paths, got %s", describe(v))
		}
		for i, e := range list {
			if s, isStr := e.(string); !isStr || s == "" || strings.ContainsAny(s, ", ") {
				f.fail(fmt.Sprintf("fp32_modules[%d]", i), "must be a submodule path such as \"features.0\", got %s", describe(e))
			} else {
				c.FP32Modules = append(c.FP32Modules, s)
			}
		}
	}
	if v, ok := f.get("options"); ok {
		if m, isMap := v.(map[string]any); isMap {
			c.Options = normalize(m).(map[string]any)
		} else {
			f.fail("options", "must be a table ([options]), got %s", describe(v))
		}
	}
	c.Inputs = f.specs("inputs")
	c.Outputs = f.specs("outputs")
	f.checkWorkers(&c, "min_workers", "max_workers")
	f.unknownAreErrors(tomlKeys)
	return c, errors.Join(f.errs...)
}

// yamlKeys are the model-config.yaml keys torchd reads (TorchServe's
// ModelConfig.java). TorchServe hands every other key to the handler, so
// here they become Options.
var yamlKeys = []string{
	"minWorkers", "maxWorkers", "batchSize", "maxBatchDelay", "responseTimeout", "startupTimeout",
	"deviceType", "deviceIds", "jobQueueSize", "handler",
}

func parseYAML(file string, data []byte) (ModelConfig, error) {
	var raw map[string]any
	if err := yaml.Unmarshal(data, &raw); err != nil {
		return ModelConfig{}, configErr(file, "", "invalid YAML: %v", err)
	}
	raw, _ = normalize(raw).(map[string]any)
	c := ModelConfig{File: file}
	f := newFields(file, "", raw)

	// TorchServe ignores 0 for these (ModelConfig.java keeps its default), so
	// 0 reads as unset, except for maxBatchDelay; negative values are errors.
	for _, k := range [][2]string{{"minWorkers", "min_workers"}, {"maxWorkers", "max_workers"},
		{"batchSize", "batch_size"}, {"maxBatchDelay", "max_batch_delay"}, {"responseTimeout", "response_timeout"},
		{"startupTimeout", "startup_timeout"}, {"jobQueueSize", "job_queue_size"}} {
		if n, ok := f.integer(k[0], 0, math.MaxInt64); ok && (n > 0 || k[1] == "max_batch_delay") {
			if err := c.Settings.Set(k[1], n); err != nil {
				f.failErr(k[0], err)
			}
		}
	}
	if s, ok := f.str("deviceType"); ok {
		switch strings.ToLower(s) {
		case "cpu":
			c.Device = Of("cpu")
		case "gpu":
			c.Device = Of("cuda")
		default:
			f.fail("deviceType", "must be cpu or gpu, got %q", s)
		}
	}
	if ids, ok := f.ints("deviceIds", 0, "GPU indexes >= 0"); ok {
		c.DeviceIDs = toInts(ids)
	}
	f.checkWorkers(&c, "minWorkers", "maxWorkers")

	// What is left is the handler's: the handler: map first, then the other
	// top-level keys, which win as they are more specific to this file.
	opts := map[string]any{}
	if v, ok := f.get("handler"); ok {
		if m, isMap := v.(map[string]any); isMap {
			for k, e := range m {
				opts[k] = e
			}
		} else {
			f.fail("handler", "must be a map of handler options (name the handler in MANIFEST.json or %s), got %s", ConfigTOML, describe(v))
		}
	}
	for k, v := range raw {
		if !slices.Contains(yamlKeys, k) {
			opts[k] = v
		}
	}
	if len(opts) > 0 {
		c.Options = opts
	}
	return c, errors.Join(f.errs...)
}

// setting reads the numeric setting key (torchd's name) from the file's fileKey: an integer,
// or "auto" where the setting takes it, within its SettingLimits.
func (f *fields) setting(s *Settings, fileKey, key string) {
	l := SettingLimits[key]
	if l.Auto && f.auto(fileKey) {
		_ = s.Set(key, "auto")
		return
	}
	v, ok := f.get(fileKey)
	if !ok {
		return
	}
	n, isInt := v.(int64)
	if !isInt {
		f.fail(fileKey, "must be an integer >= %d, got %s", l.Min, describe(v))
		return
	}
	if err := s.Set(key, n); err != nil {
		f.failErr(fileKey, err)
	}
}

// checkDevice accepts "cpu", "cuda" and "cuda:N".
func checkDevice(s string) error {
	if s == "cpu" || s == "cuda" {
		return nil
	}
	if n, ok := strings.CutPrefix(s, "cuda:"); ok {
		if i, err := strconv.Atoi(n); err == nil && i >= 0 && i < 1024 && strconv.Itoa(i) == n {
			return nil
		}
	}
	return fmt.Errorf(`must be "cpu", "cuda" or "cuda:N", got %q`, s)
}

// fields reads typed values out of one decoded table, recording which keys
// were read and an error for each bad value.
type fields struct {
	file, prefix string // prefix is the table's path for errors, e.g. "inputs[0]."
	m            map[string]any
	used         map[string]bool
	errs         []error
}

func newFields(file, prefix string, m map[string]any) *fields {
	return &fields{file: file, prefix: prefix, m: m, used: map[string]bool{}}
}

func (f *fields) fail(key, format string, args ...any) {
	f.errs = append(f.errs, configErr(f.file, f.prefix+key, format, args...))
}

func (f *fields) failErr(key string, err error) {
	f.errs = append(f.errs, &ConfigError{File: f.file, Key: f.prefix + key, Err: err})
}

func (f *fields) get(key string) (any, bool) {
	v, ok := f.m[key]
	if ok {
		f.used[key] = true
	}
	return v, ok
}

// auto reports (and consumes) a key whose value is the string "auto": the daemon then
// chooses the value itself (self-tuning batching).
func (f *fields) auto(key string) bool {
	if v, ok := f.m[key]; ok && v == "auto" {
		f.used[key] = true
		return true
	}
	return false
}

func (f *fields) str(key string) (string, bool) {
	v, ok := f.get(key)
	if !ok {
		return "", false
	}
	s, ok := v.(string)
	if !ok {
		f.fail(key, "must be a string, got %s", describe(v))
	}
	return s, ok
}

func (f *fields) boolean(key string) (bool, bool) {
	v, ok := f.get(key)
	if !ok {
		return false, false
	}
	b, ok := v.(bool)
	if !ok {
		f.fail(key, "must be true or false, got %s", describe(v))
	}
	return b, ok
}

// integer reads an integer in [lo, hi].
func (f *fields) integer(key string, lo, hi int64) (int64, bool) {
	v, ok := f.get(key)
	if !ok {
		return 0, false
	}
	n, ok := v.(int64)
	switch {
	case !ok:
		f.fail(key, "must be an integer >= %d, got %s", lo, describe(v))
	case n < lo:
		f.fail(key, "must be an integer >= %d, got %d", lo, n)
	case n > hi:
		f.fail(key, "must be an integer <= %d, got %d", hi, n)
	default:
		return n, true
	}
	return 0, false
}

// ints reads an array of integers, each >= lo.
func (f *fields) ints(key string, lo int64, what string) ([]int64, bool) {
	v, ok := f.get(key)
	if !ok {
		return nil, false
	}
	list, ok := v.([]any)
	if !ok {
		f.fail(key, "must be an array of %s, got %s", what, describe(v))
		return nil, false
	}
	out := make([]int64, len(list))
	for i, e := range list {
		n, ok := e.(int64)
		if !ok || n < lo || n > maxCount {
			f.fail(fmt.Sprintf("%s[%d]", key, i), "must be one of %s, got %s", what, describe(e))
			return nil, false
		}
		out[i] = n
	}
	return out, true
}

// specs reads an array of [[inputs]] or [[outputs]] tables.
func (f *fields) specs(key string) []TensorSpec {
	v, ok := f.get(key)
	if !ok {
		return nil
	}
	var tables []map[string]any
	switch x := v.(type) {
	case []map[string]any:
		tables = x
	case []any: // inline: inputs = [{name = "x", ...}]
		for i, e := range x {
			t, ok := e.(map[string]any)
			if !ok {
				f.fail(fmt.Sprintf("%s[%d]", key, i), "must be a table with name, dtype and shape, got %s", describe(e))
				return nil
			}
			tables = append(tables, t)
		}
	default:
		f.fail(key, "must be an array of tables ([[%s]]), got %s", key, describe(v))
		return nil
	}
	specs := make([]TensorSpec, 0, len(tables))
	seen := map[string]bool{}
	for i, t := range tables {
		g := newFields(f.file, fmt.Sprintf("%s%s[%d].", f.prefix, key, i), t)
		var s TensorSpec
		if name, ok := g.str("name"); ok && name != "" {
			if seen[name] {
				g.fail("name", "%q is declared twice", name)
			}
			seen[name] = true
			s.Name = name
		} else if ok || g.m["name"] == nil {
			g.fail("name", "required: a non-empty string")
		}
		if dt, ok := g.str("dtype"); ok {
			if !validDType(dt) {
				g.fail("dtype", "must be one of %s, got %q", strings.Join(DTypes, ", "), dt)
			}
			s.DType = dt
		} else if g.m["dtype"] == nil {
			g.fail("dtype", "required: one of %s", strings.Join(DTypes, ", "))
		}
		if dims, ok := g.ints("shape", -1, "dimensions (-1 for variable, else >= 1)"); ok {
			for j, d := range dims {
				if d == 0 {
					g.fail(fmt.Sprintf("shape[%d]", j), "must be -1 (variable) or >= 1, got 0")
				}
			}
			s.Shape = dims
			if _, err := s.SampleBytes(); err != nil {
				g.fail("shape", "%v", err)
			}
		}
		g.unknownAreErrors([]string{"name", "dtype", "shape"})
		f.errs = append(f.errs, g.errs...)
		specs = append(specs, s)
	}
	return specs
}

// checkWorkers refuses max < min when the file sets both.
func (f *fields) checkWorkers(c *ModelConfig, minKey, maxKey string) {
	if c.MinWorkers.Set && c.MaxWorkers.Set && c.MaxWorkers.V < c.MinWorkers.V {
		f.fail(maxKey, "must be >= %s (%d), got %d", minKey, c.MinWorkers.V, c.MaxWorkers.V)
	}
}

// unknownAreErrors reports every key that no reader asked for.
func (f *fields) unknownAreErrors(known []string) {
	var unknown []string
	for k := range f.m {
		if !f.used[k] {
			unknown = append(unknown, k)
		}
	}
	slices.Sort(unknown)
	for _, k := range unknown {
		f.fail(k, "unknown key; allowed: %s", strings.Join(known, ", "))
	}
}

func toInts(v []int64) []int {
	out := make([]int, len(v))
	for i, n := range v {
		out[i] = int(n)
	}
	return out
}

// normalize converts decoded TOML and YAML values to one set of types:
// string, int64, float64, bool, nil, []any and map[string]any, so handlers
// see the same types whichever file their options came from.
func normalize(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = normalize(e)
		}
		return out
	case map[any]any: // YAML with non-string keys
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[fmt.Sprint(k)] = normalize(e)
		}
		return out
	case []map[string]any: // TOML array of tables
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = normalize(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = normalize(e)
		}
		return out
	case int:
		return int64(x)
	case uint64:
		if x <= math.MaxInt64 {
			return int64(x)
		}
		return float64(x)
	case float32:
		return float64(x)
	case fmt.Stringer: // TOML and YAML dates and times
		return x.String()
	}
	return v
}
