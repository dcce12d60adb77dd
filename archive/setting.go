package archive

import (
	"fmt"
	"time"
)

// SettingLimit is the range of one numeric per-model setting, in its unit: a count, or a number of
// milliseconds or seconds. Every source of settings (an archive's config, a registration,
// TorchServe's gRPC, the snapshot, the server's configuration) checks against the same
// SettingLimits through Settings.Set; how a source words a value it cannot read is its own.
type SettingLimit struct {
	Min, Max int64
	Unit     time.Duration // 0: a count
	Auto     bool          // the setting may also be "auto"
}

// maxUnits caps durations given in ms or s, so that no value overflows time.Duration; 1e9 s
// is 31 years. maxCount caps counts.
const (
	maxUnits = 1_000_000_000
	maxCount = 1<<31 - 1
)

// SettingLimits are the numeric per-model settings by their torchd name (model-config.toml's keys).
// A source whose 0 means "not given" (the server's threads, max_workers; TorchServe's YAML and
// gRPC) leaves 0 unset rather than setting it.
var SettingLimits = map[string]SettingLimit{
	"batch_size":        {Min: 1, Max: maxCount, Auto: true},
	"max_batch_delay":   {Min: 0, Max: maxUnits, Unit: time.Millisecond, Auto: true},
	"min_workers":       {Min: 0, Max: maxCount, Auto: true},
	"max_workers":       {Min: 1, Max: maxCount},
	"job_queue_size":    {Min: 1, Max: maxCount},
	"latency_target_ms": {Min: 1, Max: maxUnits, Unit: time.Millisecond},
	"response_timeout":  {Min: 1, Max: maxUnits, Unit: time.Second},
	"startup_timeout":   {Min: 0, Max: maxUnits, Unit: time.Second}, // 0 fails a load that waits
	"threads":           {Min: 1, Max: maxCount},
	"forward_batch":     {Min: 0, Max: maxCount, Auto: true}, // 0: the whole batch, as the server's setting
}

// RangeError is a numeric setting outside its SettingLimit. Got is in the setting's unit.
type RangeError struct {
	Key string
	SettingLimit
	Got int64
}

func (e *RangeError) Error() string {
	if e.Got > e.Max {
		return fmt.Sprintf("must be an integer <= %d, got %d", e.Max, e.Got)
	}
	return fmt.Sprintf("must be an integer >= %d, got %d", e.Min, e.Got)
}

// Set sets the per-model setting key (torchd's name, as in SettingLimits, or device, precision,
// freeze, optimize_for_inference) of s from v:
//   - "auto", for a setting whose SettingLimit allows it;
//   - an int64 (or int): a count, or a number of the setting's unit;
//   - a time.Duration, for a setting measured in ms or s: its limits are checked in that unit,
//     rounded down;
//   - a string for device and precision, a bool for freeze and optimize_for_inference.
//
// A number outside its SettingLimit is a *RangeError; s is unchanged on any error.
func (s *Settings) Set(key string, v any) error {
	if n, ok := v.(int); ok {
		v = int64(n)
	}
	if l, numeric := SettingLimits[key]; numeric {
		if v == "auto" {
			if !l.Auto {
				return fmt.Errorf("%s cannot be \"auto\"", key)
			}
			return s.setAuto(key)
		}
		var n int64
		d, isDur := v.(time.Duration)
		switch x := v.(type) {
		case int64:
			n = x
		case time.Duration:
			if l.Unit == 0 {
				return fmt.Errorf("%s is a count, not a duration", key)
			}
			n = int64(x / l.Unit)
			if x < 0 {
				n = min(n, -1)
			}
		default:
			return fmt.Errorf("%s must be an integer", key)
		}
		if n < l.Min || n > l.Max {
			return &RangeError{Key: key, SettingLimit: l, Got: n}
		}
		if !isDur {
			d = time.Duration(n) * l.Unit // in range: no overflow
		}
		s.setNumber(key, n, d)
		return nil
	}
	switch key {
	case "device", "precision":
		str, ok := v.(string)
		if !ok {
			return fmt.Errorf("%s must be a string", key)
		}
		if key == "device" {
			if err := checkDevice(str); err != nil {
				return err
			}
			s.Device = Of(str)
			return nil
		}
		if err := CheckPrecision(str); err != nil {
			return err
		}
		s.Precision = Of(str)
	case "freeze", "optimize_for_inference":
		b, ok := v.(bool)
		if !ok {
			return fmt.Errorf("%s must be true or false", key)
		}
		if key == "freeze" {
			s.Freeze = Of(b)
		} else {
			s.Optimize = Of(b)
		}
	default:
		return fmt.Errorf("unknown per-model setting %q", key)
	}
	return nil
}

func (s *Settings) setAuto(key string) error {
	switch key {
	case "batch_size":
		s.BatchSize = Auto[int]()
	case "max_batch_delay":
		s.MaxBatchDelay = Auto[time.Duration]()
	case "min_workers":
		s.MinWorkers = Auto[int]()
	case "forward_batch":
		s.ForwardBatch = Auto[int]()
	}
	return nil
}

// setNumber sets a numeric setting already checked: n as a count, d as a duration.
func (s *Settings) setNumber(key string, n int64, d time.Duration) {
	switch key {
	case "batch_size":
		s.BatchSize = Fixed(int(n))
	case "max_batch_delay":
		s.MaxBatchDelay = Fixed(d)
	case "min_workers":
		s.MinWorkers = Fixed(int(n))
	case "max_workers":
		s.MaxWorkers = Of(int(n))
	case "job_queue_size":
		s.JobQueueSize = Of(int(n))
	case "latency_target_ms":
		s.LatencyTarget = Of(d)
	case "response_timeout":
		s.ResponseTimeout = Of(d)
	case "startup_timeout":
		s.StartupTimeout = Of(d)
	case "threads":
		s.Threads = Of(int(n))
	case "forward_batch":
		s.ForwardBatch = Fixed(int(n))
	}
}

// Unset clears the setting key, as if its source had not given it.
func (s *Settings) Unset(key string) {
	switch key {
	case "batch_size":
		s.BatchSize = Tunable[int]{}
	case "max_batch_delay":
		s.MaxBatchDelay = Tunable[time.Duration]{}
	case "min_workers":
		s.MinWorkers = Tunable[int]{}
	case "max_workers":
		s.MaxWorkers = Value[int]{}
	case "job_queue_size":
		s.JobQueueSize = Value[int]{}
	case "latency_target_ms":
		s.LatencyTarget = Value[time.Duration]{}
	case "response_timeout":
		s.ResponseTimeout = Value[time.Duration]{}
	case "startup_timeout":
		s.StartupTimeout = Value[time.Duration]{}
	case "threads":
		s.Threads = Value[int]{}
	case "forward_batch":
		s.ForwardBatch = Tunable[int]{}
	case "device":
		s.Device = Value[string]{}
	case "precision":
		s.Precision = Value[string]{}
	case "freeze":
		s.Freeze = Value[bool]{}
	case "optimize_for_inference":
		s.Optimize = Value[bool]{}
	}
}
