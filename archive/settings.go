package archive

import (
	"fmt"
	"time"
)

// Settings are a model's serving settings as one source gives them: an archive's config, the
// server's configuration (what its file, environment and flags set), a registration, or the
// built-in defaults. A field the source did not give is unset, so that the sources can be
// layered (core.Resolve): the highest source that gives a setting decides it. batch_size,
// max_batch_delay and the workers may also be "auto": the daemon measures the model and
// picks them (package tuner), and forward_batch too (measured at load).
type Settings struct {
	BatchSize     Tunable[int]           // requests per forward
	MaxBatchDelay Tunable[time.Duration] // longest wait to fill a batch; 0: never wait
	MinWorkers    Tunable[int]           // workers at start (min_workers, workers, initial_workers)
	MaxWorkers    Value[int]             // upper bound for scaling; below MinWorkers: MinWorkers
	JobQueueSize  Value[int]             // queued requests before 503
	// LatencyTarget is the p99 that automatic batching holds; 0: none.
	LatencyTarget   Value[time.Duration]
	ResponseTimeout Value[time.Duration] // per request once queued
	StartupTimeout  Value[time.Duration] // per model load and warm-up; 0 fails a load that waits
	// Device is "cpu", "cuda" (GPUs round-robin) or "cuda:N".
	Device Value[string]
	// Threads is LibTorch's intra-op threads per forward; 0: the cores no other forward holds.
	Threads Value[int]
	// ForwardBatch is the most rows one forward runs: a bigger batch runs as several forwards
	// in turn. Unset: the whole batch; auto: the size with the best measured throughput.
	ForwardBatch Tunable[int]
	Freeze       Value[bool] // run torch.jit.freeze on the loaded module
	Optimize     Value[bool] // run torch.jit.optimize_for_inference (which freezes) on it
	// Precision is one of Precisions: a TorchScript model runs under autocast to bfloat16
	// with bf16; an AOTInductor package must have been exported in it.
	Precision Value[string]
}

// Value is one setting of one source: V when Set, else unset.
type Value[T any] struct {
	V   T
	Set bool
}

// Tunable is a setting that may also be "auto". At most one of Set and Auto is true;
// neither is unset.
type Tunable[T any] struct {
	V    T
	Set  bool
	Auto bool
}

// Of is the value v, set.
func Of[T any](v T) Value[T] { return Value[T]{V: v, Set: true} }

// NonZero is v set, or unset when v is T's zero value: for sources whose 0 means "not given".
func NonZero[T comparable](v T) Value[T] {
	var zero T
	return Value[T]{V: v, Set: v != zero}
}

// Fixed is the value v of a setting that may be "auto".
func Fixed[T any](v T) Tunable[T] { return Tunable[T]{V: v, Set: true} }

// Auto is "auto".
func Auto[T any]() Tunable[T] { return Tunable[T]{Auto: true} }

// Given reports whether the source gave the setting, as a value or as "auto".
func (t Tunable[T]) Given() bool { return t.Set || t.Auto }

func (v Value[T]) String() string {
	if !v.Set {
		return "unset"
	}
	return fmt.Sprint(v.V)
}

func (t Tunable[T]) String() string {
	if t.Auto {
		return "auto"
	}
	return Value[T]{V: t.V, Set: t.Set}.String()
}
