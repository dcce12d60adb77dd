package core

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/handlers"
)

// A load that cannot serve fails with a kind and a message that says why, and leaves
// nothing behind: the name is free again.
func TestLoadRefusals(t *testing.T) {
	r := testRegistry(t, 0)
	notTorchScript := func() *archive.Model {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "model.pt"), []byte("not a TorchScript file"), 0o644)
		os.WriteFile(filepath.Join(dir, "model-config.toml"), []byte("handler = \"tensor\"\n"+digitsConfig), 0o644)
		am, err := archive.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		return am
	}
	for _, c := range []struct {
		name string
		am   func() *archive.Model
		req  RegisterRequest
		kind error
		part string
	}{
		{"not TorchScript", notTorchScript, RegisterRequest{}, ErrLoadFailed, "failed to load model m version 1"},
		{"warm-up input of the wrong shape", func() *archive.Model {
			return zooArchive(t, "digits", "tensor", "[[inputs]]\nname = \"x\"\ndtype = \"float32\"\nshape = [-1, 3, 32, 32]\n")
		}, RegisterRequest{}, ErrLoadFailed, "failed its warm-up forward"},
		{"two inputs declared, forward takes one", func() *archive.Model {
			return zooArchive(t, "digits", "tensor", digitsConfig+strings.Replace(digitsConfig, "input__0", "input__1", 1))
		}, RegisterRequest{}, ErrLoadFailed, "Expected at most 2 argument(s)"},
		{"no time to start", func() *archive.Model { return zooArchive(t, "digits", "tensor", digitsConfig) },
			RegisterRequest{Synchronous: true, Settings: archive.Settings{StartupTimeout: archive.Of(time.Duration(0))}}, ErrStartupTimeout, "startup_timeout"},
	} {
		_, err := r.Add("m", "1", c.req, c.am())
		errorContains(t, c.name, err, c.kind, c.part)
		if _, err := r.Get("m", "1"); !errorIs(err, ErrModelNotFound) {
			t.Errorf("%s: after the failed load, Get: %v, want ErrModelNotFound", c.name, err)
		}
	}
	// The name is free: the same model loads.
	if v := addDigits(t, r, "m", "tensor", archive.Settings{}); v.State() != StateReady {
		t.Fatalf("state %v after a synchronous load", v.State())
	}
}

// Settings resolve lowest first: the registry's defaults, the archive's config, the
// registration; workers above max_workers raise it.
func TestLoadResolvesSettings(t *testing.T) {
	r := testRegistry(t, 0)
	am := zooArchive(t, "digits", "tensor", "batch_size = 4\nmax_batch_delay = 7\njob_queue_size = 9\n"+digitsConfig)
	v, err := r.Add("m", "1", RegisterRequest{Synchronous: true, Settings: archive.Settings{MinWorkers: archive.Fixed(2), JobQueueSize: archive.Of(11)}}, am)
	if err != nil {
		t.Fatal(err)
	}
	s := v.Settings()
	if s.BatchSize != 4 || s.MaxBatchDelay != 7*time.Millisecond || s.JobQueueSize != 11 || s.MinWorkers != 2 || s.MaxWorkers != 2 {
		t.Fatalf("settings %+v", s)
	}
	if st := v.Stats(); st.BatchSize != 4 || st.MaxDelay != 7*time.Millisecond || st.Capacity != 11 || v.WorkerCount() != 2 {
		t.Fatalf("stats %+v, %d workers", st, v.WorkerCount())
	}
}

// A declared shape whose dimensions are each in range and whose product is not is an error,
// not a makeslice panic (or tens of gigabytes of zeros) when the warm-up sample is built.
// Archive configs are refused as they are read; this is the load's own check.
func TestWarmupSamplesBounded(t *testing.T) {
	for _, shape := range [][]int64{{-1, 100000, 100000, 100000}, {-1, 10000, 1000, 1000}} {
		ac := archive.ModelConfig{Handler: "tensor", Inputs: []archive.TensorSpec{{Name: "x", DType: "float32", Shape: shape}}}
		h, err := handlers.New("tensor", handlers.Context{Config: ac})
		if err != nil {
			t.Fatal(err)
		}
		if s, err := warmupSamples(h, ac); err == nil || !strings.Contains(err.Error(), `input "x"`) {
			t.Errorf("%v: %d samples, %v; want an error naming the input", shape, len(s), err)
		}
	}
	ac := archive.ModelConfig{Handler: "tensor", Inputs: []archive.TensorSpec{{Name: "x", DType: "float32", Shape: []int64{-1, 3, 4}}}}
	h, _ := handlers.New("tensor", handlers.Context{Config: ac})
	s, err := warmupSamples(h, ac)
	if err != nil || len(s) != 3 || len(s[0].Tensors[0].Data) != 3*4*4 {
		t.Fatalf("[-1 3 4]: %v, %v", s, err)
	}
}
