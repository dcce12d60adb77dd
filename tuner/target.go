package tuner

import "time"

// Target is the model version a Tuner tunes: all the tuner needs of the serving core. It
// sets the batching and the workers' intra-op threads, and reads what was dispatched. The
// tuner calls it from its own goroutine only.
type Target interface {
	// SetBatching sets the batch limit and the most a batch waits to fill; the next batch
	// uses them.
	SetBatching(limit int, delay time.Duration)
	// SetThreads sets the workers' intra-op threads; a worker takes them before its next
	// batch.
	SetThreads(n int)
	// Stats reads the dispatch counters.
	Stats() Stats
}

// Stats are the counters a Target keeps of its dispatches, read at one moment. A window is
// the difference of two readings.
type Stats struct {
	Batches int64         // batches dispatched so far
	Items   int64         // requests dispatched in them
	Busy    time.Duration // the workers' time spent running batches, in all
	Last    Dispatch      // the latest dispatch (zero before the first)
	// The batching in force: the limit and delay of the next batch.
	BatchSize int
	MaxDelay  time.Duration
}

// Dispatch marks one dispatch: its time, and the batches and requests dispatched before it.
// Two marks give a rate over whole batches.
type Dispatch struct {
	At      time.Time
	Batches int64 // batches dispatched before it
	Before  int64 // requests dispatched before it
}
