package archive

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// Every numeric setting takes its minimum and its maximum and refuses one past either, with a
// *RangeError; a duration is checked in the setting's unit.
func TestSettingLimits(t *testing.T) {
	for key, l := range SettingLimits {
		for _, n := range []int64{l.Min, l.Max} {
			var s Settings
			if err := s.Set(key, n); err != nil {
				t.Errorf("%s = %d: %v", key, n, err)
			}
			if l.Unit != 0 {
				if err := s.Set(key, time.Duration(n)*l.Unit); err != nil {
					t.Errorf("%s = %v: %v", key, time.Duration(n)*l.Unit, err)
				}
			}
		}
		for _, n := range []int64{l.Min - 1, l.Max + 1} {
			var s Settings
			err := s.Set(key, n)
			var re *RangeError
			if !errors.As(err, &re) || re.Key != key || re.Got != n {
				t.Errorf("%s = %d: %v, want a RangeError", key, n, err)
			}
			if s != (Settings{}) {
				t.Errorf("%s = %d: refused, but set %+v", key, n, s)
			}
		}
		var s Settings
		if err := s.Set(key, "auto"); (err == nil) != l.Auto {
			t.Errorf("%s = auto: %v (auto allowed: %v)", key, err, l.Auto)
		}
	}
	var s Settings
	if err := s.Set("response_timeout", 500*time.Millisecond); err == nil {
		t.Errorf("response_timeout = 500ms: accepted below its 1 s minimum")
	}
	if err := s.Set("max_batch_delay", 500*time.Microsecond); err != nil || s.MaxBatchDelay != Fixed(500*time.Microsecond) {
		t.Errorf("max_batch_delay = 0.5 ms: %v, %v", err, s.MaxBatchDelay)
	}
	for _, bad := range []struct {
		key string
		v   any
	}{{"threads", "4"}, {"threads", 2 * time.Second}, {"device", "tpu"}, {"precision", "fp8"}, {"freeze", "yes"}, {"colour", 1}} {
		if err := s.Set(bad.key, bad.v); err == nil {
			t.Errorf("%s = %v: accepted", bad.key, bad.v)
		}
	}
}

// A model-config.toml and a TorchServe model-config.yaml refuse the values SettingLimits
// refuses, naming their own key.
func TestSettingLimitsInConfigFiles(t *testing.T) {
	yamlKeys := map[string]string{"min_workers": "minWorkers", "max_workers": "maxWorkers", "batch_size": "batchSize",
		"max_batch_delay": "maxBatchDelay", "response_timeout": "responseTimeout", "startup_timeout": "startupTimeout",
		"job_queue_size": "jobQueueSize"}
	for key, l := range SettingLimits {
		if _, err := ParseModelConfig(ConfigTOML, fmt.Appendf(nil, "%s = %d\n", key, l.Min)); err != nil {
			t.Errorf("toml %s = %d: %v", key, l.Min, err)
		}
		for _, n := range []int64{l.Min - 1, l.Max + 1} {
			_, err := ParseModelConfig(ConfigTOML, fmt.Appendf(nil, "%s = %d\n", key, n))
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.Key != key || !strings.Contains(err.Error(), "must be an integer") {
				t.Errorf("toml %s = %d: %v", key, n, err)
			}
		}
		y, ok := yamlKeys[key]
		if !ok {
			continue
		}
		// TorchServe's 0 is unset, except for maxBatchDelay; a negative is refused.
		_, err := ParseModelConfig(ConfigYAML, fmt.Appendf(nil, "%s: %d\n", y, l.Max+1))
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Key != y {
			t.Errorf("yaml %s: %d: %v", y, l.Max+1, err)
		}
		if _, err := ParseModelConfig(ConfigYAML, fmt.Appendf(nil, "%s: -1\n", y)); err == nil {
			t.Errorf("yaml %s: -1: accepted", y)
		}
	}
}
