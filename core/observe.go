package core

import "time"

// Recorder is where the core reports what it serves (frontend/metrics): an Observer
// per model version, and Drop when a version leaves. A reloaded version gets the Observer of
// the version it replaces, which then reports the new one.
type Recorder interface {
	Version(v *ModelVersion) Observer
	Drop(name, version string)
}

// Observer records one model version's requests, batches and workers.
type Observer interface {
	// Request records a request at its end: err is how it failed (nil: answered), with one
	// of the core's kinds; took is its whole time in the server, queued its time in the queue;
	// named whether the request named its version (TorchServe's series label the others
	// "default").
	Request(err error, took, queued time.Duration, named bool)
	Batch(size int, forward, overhead time.Duration)
	Preprocess(start time.Time)
	Postprocess(start time.Time)
	Handler(d time.Duration) // decode, preprocess, forward and postprocess, less the queue
	Workers(n int)
	Stuck(n int)
	WorkerLoaded(id int, d time.Duration)
	WorkerStopped(id int) // a worker that was loaded has stopped
}

// nothing records nothing, for a registry without a Recorder.
type nothing struct{}

func (nothing) Version(*ModelVersion) Observer                    { return nothing{} }
func (nothing) Drop(string, string)                               {}
func (nothing) Request(error, time.Duration, time.Duration, bool) {}
func (nothing) Batch(int, time.Duration, time.Duration)           {}
func (nothing) Preprocess(time.Time)                              {}
func (nothing) Postprocess(time.Time)                             {}
func (nothing) Handler(time.Duration)                             {}
func (nothing) Workers(int)                                       {}
func (nothing) Stuck(int)                                         {}
func (nothing) WorkerLoaded(int, time.Duration)                   {}
func (nothing) WorkerStopped(int)                                 {}
