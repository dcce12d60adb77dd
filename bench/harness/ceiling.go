package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strconv"
)

// ceiling is `torchd bench-model --json`'s answer: the same handler's preprocessing, batched
// forward and postprocessing, in-process, with no HTTP, batch after batch and pipelined as the
// server runs them. Its best is this machine's limit for the model.
type ceiling struct {
	Threads     int    `json:"threads"`
	LibTorch    string `json:"libtorch"`
	InputBytes  int    `json:"input_bytes"`
	PreprocessN int64  `json:"preprocess_ns"`
	PostprocN   int64  `json:"postprocess_ns"`
	SingleN     int64  `json:"single_ns"`
	Batches     []struct {
		Batch      int     `json:"batch"`
		ForwardN   int64   `json:"forward_ns"`
		CycleN     int64   `json:"cycle_ns"`
		Throughput float64 `json:"throughput"`
	} `json:"batches"`
	// Best is the best of all, most often pipelined: preprocessing overlapped with the
	// forwards of Workers workers, as the server runs.
	Best struct {
		Batch      int     `json:"batch"`
		Workers    int     `json:"workers"`
		Threads    int     `json:"threads"`
		Pipelined  bool    `json:"pipelined"`
		Throughput float64 `json:"throughput"`
	} `json:"best"`
	Cmd string `json:"cmd"`
}

// ceiling measures w's in-process ceiling at the given batch sizes: rounds of at least t
// per batch size.
func (h *harness) ceiling(ctx context.Context, w workload, batches, rounds, t string) (*ceiling, error) {
	args := []string{"bench-model", "--json", "--input", w.File, "--content-type", w.ContentType,
		"--batch-sizes", batches, "--threads", strconv.Itoa(h.cfg.threads), "--rounds", rounds, "--time", t, w.Archive}
	cmd := exec.CommandContext(ctx, h.cfg.torchd, args...)
	cmd.Dir = h.cfg.root
	cmd.Env = h.cfg.serverEnv()
	out, err := cmd.Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return nil, fmt.Errorf("%v: %s", err, lastLines(string(ee.Stderr), 3))
		}
		return nil, err
	}
	var c ceiling
	if err := json.Unmarshal(out, &c); err != nil {
		return nil, fmt.Errorf("bench-model output: %w", err)
	}
	c.Cmd = "bin/torchd " + displayArgs(args[:1]) + " " + displayArgs(args[2:])
	return &c, nil
}
