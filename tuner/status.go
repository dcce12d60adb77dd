package tuner

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// Change is one change of the automatic settings, for describe.
type Change struct {
	At        time.Time `json:"at"`
	BatchSize int       `json:"batchSize"`
	DelayMS   float64   `json:"maxBatchDelayMs"`
	Threads   int       `json:"threads,omitempty"`
	Reason    string    `json:"reason"`
}

// LoadLevel is one remembered load level, for describe.
type LoadLevel struct {
	InServer  float64 `json:"requestsInServer"` // the level's lower bound
	BatchSize int     `json:"batchSize"`
	Linger    bool    `json:"linger"`
	Backoff   int     `json:"probeBackoffWindows"`
}

// Status is describe's view of the tuner.
type Status struct {
	BatchSize       int         `json:"batchSize"`
	MaxBatchDelayMS float64     `json:"maxBatchDelayMs"`
	LatencyTargetMS float64     `json:"latencyTargetMs,omitempty"`
	LastP99MS       float64     `json:"lastP99Ms"`
	Auto            []string    `json:"auto"`
	Changes         int         `json:"changes"`
	Probes          int         `json:"probes"`
	ProbesPiledUp   int         `json:"probesEndedPiledUp"`
	MaxBatchSize    int         `json:"maxBatchSize"`
	Linger          bool        `json:"linger"`
	LoadLevels      []LoadLevel `json:"loadLevels"`
	History         []Change    `json:"history"`
	Curve           []Point     `json:"curve"`
	CurveSource     string      `json:"curveSource"`
	CurveSeconds    float64     `json:"curveMeasureSeconds"`
	Workers         int         `json:"workers"`
	Threads         int         `json:"threads"` // intra-op threads per worker
}

// Status is describe's view of the tuner now.
func (t *Tuner) Status() *Status {
	t.mu.Lock()
	defer t.mu.Unlock()
	var auto []string
	if t.auto.batch {
		auto = append(auto, "batch_size")
	}
	if t.auto.delay {
		auto = append(auto, "max_batch_delay")
	}
	if t.tunesThreads() {
		auto = append(auto, "threads")
	}
	levels := []LoadLevel{}
	for l, m := range t.levels {
		levels = append(levels, LoadLevel{InServer: math.Round(math.Pow(2, (float64(l)-0.5)/2)*10) / 10, BatchSize: m.limit, Linger: m.linger, Backoff: m.backoff})
	}
	slices.SortFunc(levels, func(a, b LoadLevel) int { return cmp.Compare(a.InServer, b.InServer) })
	return &Status{
		Linger: t.linger, LoadLevels: levels,
		BatchSize: t.limit, MaxBatchDelayMS: float64(t.delay) / 1e6, LatencyTargetMS: float64(t.target) / 1e6,
		LastP99MS: float64(t.lastP99) / 1e6, Auto: auto, Changes: t.changes, Probes: t.probes, ProbesPiledUp: t.overruns, MaxBatchSize: t.maxCap,
		History: slices.Clone(t.history), Curve: t.curve.Points, CurveSource: t.source, CurveSeconds: t.curve.Took, Workers: t.workers, Threads: t.threads,
	}
}
