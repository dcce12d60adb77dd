package tuner

import (
	"fmt"
	"log/slog"
	"time"
)

// ForwardBatch is forward_batch = "auto": the batch size, up to maxBatch (and the curves'
// 64), at which m's forward runs the most rows a second with the given intra-op threads (a
// worker's share when every worker runs), from the same curve measurement as the batching's,
// cached alike.
//
// A model whose activations outgrow the caches as the batch grows (EfficientNet's
// depthwise convolutions, memory-bound) runs a batch of 32 slower per row than four batches
// of 8; a batch it receives is then run as forwards of this size in turn.
func ForwardBatch(m Model, threads, maxBatch int, cacheDir string, log *slog.Logger) (int, error) {
	maxBatch = min(maxBatch, curveMaxBatch)
	if m.MaxRows > 0 {
		maxBatch = min(maxBatch, int(m.MaxRows))
	}
	if maxBatch <= 1 {
		return 1, nil
	}
	key, err := curveKey(m.Path, m.Device, threads, m.Sample, false)
	if err != nil {
		return 0, err
	}
	// Its own file: the batching curve under the same key may stop at another maxBatch.
	path := curvePath(cacheDir, fmt.Sprintf("%s-forward%d", key, maxBatch))
	c, source, err := cachedCurve(path, m.Name, "forward_batch curve", log, func() (*curve, error) {
		return measureCurve(m.Run, m.Sample, threads, maxBatch, 0)
	})
	if err != nil {
		return 0, err
	}
	b := c.fastestRows()
	log.Info("forward_batch auto", "model", m.Name, "source", source, "threads", threads, "forward_batch", b,
		"points", len(c.Points), "measure_time", time.Duration(c.Took*float64(time.Second)).Round(time.Millisecond))
	return b, nil
}

// fastestRows is the largest measured batch within 10% of the most rows a second: every
// forward has fixed costs that serving adds and the curve does not show (staging, waking
// the requests), and the curve's points are that close in noise.
func (c *curve) fastestRows() int {
	if b := c.plateau(0.9); len(b) > 0 {
		return b[len(b)-1]
	}
	return 1
}
