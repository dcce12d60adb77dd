package daemon

import (
	"cmp"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/frontend/torchserve"
)

// layers are one model's sources of settings, each parsed as the daemon parses it: the
// archive's model-config.toml, the server's torchd.toml, environment and flags, and the
// registration's query.
type layers struct {
	archive string            // model-config.toml
	file    string            // torchd.toml
	env     map[string]string // the server's environment
	flags   []string          // the server's flags
	query   string            // the registration's parameters
}

func (l layers) resolve(t *testing.T) ModelSettings {
	t.Helper()
	ac, err := archive.ParseModelConfig(archive.ConfigTOML, []byte(l.archive))
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for k, v := range l.env {
		env[k] = v
	}
	if l.file != "" {
		env["TORCHD_CONFIG"] = writeTOML(t, l.file)
	}
	c, err := LoadConfig(l.flags, envOf(env))
	if err != nil {
		t.Fatal(err)
	}
	var q fasthttp.Args
	q.Parse(l.query)
	var reg archive.Settings
	if err := torchserve.QuerySettings(&q, slog.New(slog.NewTextHandler(io.Discard, nil)), &reg); err != nil {
		t.Fatal(err)
	}
	return core.Resolve(ModelDefaults(), ac.Settings, c.Model, reg)
}

// A per-model setting: its name in each source ("" where the source has none), the value each
// source gives (the archive's as TOML), and the resolved value that each gives.
type perModel struct {
	key, archiveKey, param    string // the server's key, the archive's, the registration's
	archive, server, register string
	want                      [4]any // defaults, archive, server, registration
	get                       func(ModelSettings) any
}

var perModelSettings = []perModel{
	{"batch_size", "batch_size", "batch_size", "8", "32", "4", [4]any{1, 8, 32, 4}, func(s ModelSettings) any { return s.BatchSize }},
	{"max_batch_delay", "max_batch_delay", "max_batch_delay", "3", "7", "0", [4]any{100 * time.Millisecond, 3 * time.Millisecond, 7 * time.Millisecond, time.Duration(0)}, func(s ModelSettings) any { return s.MaxBatchDelay }},
	{"workers", "min_workers", "initial_workers", "2", "3", "0", [4]any{1, 2, 3, 0}, func(s ModelSettings) any { return s.MinWorkers }},
	{"latency_target_ms", "latency_target_ms", "latency_target_ms", "50", "60", "70", [4]any{time.Duration(0), 50 * time.Millisecond, 60 * time.Millisecond, 70 * time.Millisecond}, func(s ModelSettings) any { return s.LatencyTarget }},
	{"max_workers", "max_workers", "", "5", "6", "", [4]any{1, 5, 6}, func(s ModelSettings) any { return s.MaxWorkers }},
	{"job_queue_size", "job_queue_size", "", "10", "20", "", [4]any{100, 10, 20}, func(s ModelSettings) any { return s.JobQueueSize }},
	{"response_timeout", "response_timeout", "response_timeout", "30", "40", "50", [4]any{120 * time.Second, 30 * time.Second, 40 * time.Second, 50 * time.Second}, func(s ModelSettings) any { return s.ResponseTimeout }},
	{"startup_timeout", "startup_timeout", "startup_timeout", "60", "70", "80", [4]any{120 * time.Second, 60 * time.Second, 70 * time.Second, 80 * time.Second}, func(s ModelSettings) any { return s.StartupTimeout }},
	{"device", "device", "", `"cuda:1"`, "cuda:2", "", [4]any{"cpu", "cuda:1", "cuda:2"}, func(s ModelSettings) any { return s.Device }},
	{"threads", "threads", "threads", "2", "3", "4", [4]any{0, 2, 3, 4}, func(s ModelSettings) any { return s.Threads }},
	{"forward_batch", "forward_batch", "forward_batch", "2", "3", "4", [4]any{0, 2, 3, 4}, func(s ModelSettings) any { return s.ForwardBatch }},
	{"freeze", "freeze", "", "true", "false", "", [4]any{false, true, false}, func(s ModelSettings) any { return s.Freeze }},
	{"optimize_for_inference", "optimize_for_inference", "", "true", "false", "", [4]any{false, true, false}, func(s ModelSettings) any { return s.Optimize }},
	{"", "precision", "precision", `"bf16"`, "", "fp16", [4]any{"fp32", "bf16", nil, "fp16"}, func(s ModelSettings) any { return s.Precision }},
}

// The per-model precedence, for every per-model setting: registration > what the server's
// file, environment or flags set > the archive's config > the built-in defaults.
func TestResolveModelSettings(t *testing.T) {
	for _, s := range settings {
		if s.model && !slices.ContainsFunc(perModelSettings, func(p perModel) bool { return p.key == s.key }) {
			t.Errorf("per-model setting %s has no case", s.key)
		}
	}
	for _, p := range perModelSettings {
		name := cmp.Or(p.key, p.archiveKey)
		check := func(layer string, l layers, want any) {
			t.Helper()
			if got := p.get(l.resolve(t)); !reflect.DeepEqual(got, want) {
				t.Errorf("%s, %s: got %v, want %v", name, layer, got, want)
			}
		}
		arch := p.archiveKey + " = " + p.archive + "\n"
		check("defaults", layers{}, p.want[0])
		check("archive over defaults", layers{archive: arch}, p.want[1])
		server := layers{archive: arch}
		if p.key != "" {
			check("file over archive", layers{archive: arch, file: fmt.Sprintf("%s = %q\n", p.key, p.server)}, p.want[2])
			check("environment over archive", layers{archive: arch, env: map[string]string{"TORCHD_" + strings.ToUpper(p.key): p.server}}, p.want[2])
			server.flags = []string{"--" + flagName(p.key) + "=" + p.server}
			check("flag over archive", server, p.want[2])
		}
		if p.param != "" {
			server.query = p.param + "=" + p.register
			check("registration over server and archive", server, p.want[3])
		}
	}

	// max_workers below the workers rises to them, wherever either came from.
	for _, c := range []struct {
		l    layers
		want [2]int
	}{
		{layers{archive: "min_workers = 3"}, [2]int{3, 3}},
		{layers{archive: "max_workers = 4"}, [2]int{1, 4}},
		{layers{archive: "max_workers = 4", flags: []string{"--workers", "6"}}, [2]int{6, 6}},
		{layers{flags: []string{"--workers", "2", "--max-workers", "1"}}, [2]int{2, 2}},
	} {
		if s := c.l.resolve(t); s.MinWorkers != c.want[0] || s.MaxWorkers != c.want[1] {
			t.Errorf("%+v: workers %d..%d, want %d..%d", c.l, s.MinWorkers, s.MaxWorkers, c.want[0], c.want[1])
		}
	}
}

// "auto" is a value like any other in the precedence: the highest source that gives batch_size,
// max_batch_delay or the workers decides between a number and auto, so a number always beats
// a lower auto, and an auto keeps the lower number until the tuner replaces it.
func TestResolveAuto(t *testing.T) {
	auto := func(s ModelSettings) [3]bool {
		return [3]bool{s.Auto.BatchSize, s.Auto.MaxBatchDelay, s.Auto.MinWorkers}
	}
	for i, p := range perModelSettings[:3] {
		// give sets the setting to v in one source: 0 the archive, 1 the server, 2 the registration.
		give := func(l *layers, source int, v string) {
			switch source {
			case 0:
				if v == "auto" {
					v = `"auto"`
				}
				l.archive = p.archiveKey + " = " + v
			case 1:
				l.env = map[string]string{"TORCHD_" + strings.ToUpper(p.key): v}
			case 2:
				l.query = p.param + "=" + v
			}
		}
		number := [3]string{p.archive, p.server, p.register}
		sources := [3]string{"archive", "server", "registration"}
		for lo := range 3 {
			var l layers
			give(&l, lo, "auto")
			s := l.resolve(t)
			if !auto(s)[i] || p.get(s) != p.want[0] {
				t.Errorf("%s: auto in the %s: %+v, want auto over the default %v", p.key, sources[lo], s, p.want[0])
			}
			for hi := lo + 1; hi < 3; hi++ {
				var l layers
				give(&l, lo, "auto")
				give(&l, hi, number[hi])
				if s := l.resolve(t); auto(s)[i] || p.get(s) != p.want[hi+1] {
					t.Errorf("%s: auto in the %s, %s in the %s: %+v, want the number", p.key, sources[lo], number[hi], sources[hi], s)
				}
				l = layers{}
				give(&l, lo, number[lo])
				give(&l, hi, "auto")
				if s := l.resolve(t); !auto(s)[i] || p.get(s) != p.want[lo+1] {
					t.Errorf("%s: %s in the %s, auto in the %s: %+v, want auto over %v", p.key, number[lo], sources[lo], sources[hi], s, p.want[lo+1])
				}
			}
		}
	}
}
