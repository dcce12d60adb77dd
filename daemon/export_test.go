package daemon

// Hooks into the engine for the end-to-end tests of package daemon_test.

import (
	"time"

	"github.com/valyala/fasthttp"
)

// ShareCores makes the forwards of models registered from now on share n cores.
func ShareCores(d *Daemon, n int) { d.Registry.cores = newCoreShare(n) }

// OnForward calls f on the worker's thread before each of v's batched forwards, with the
// intra-op threads LibTorch reports there.
func OnForward(v *ModelVersion, f func(threads int)) { v.pool.onForward.Store(&f) }

// WindowStats returns v's window: places held now, the most held at once, the requests that
// waited for one, and its size.
func WindowStats(v *ModelVersion) (held, peak, waited, size int) {
	held, peak, waited = v.batcher.win.stats()
	v.batcher.win.mu.Lock()
	defer v.batcher.win.mu.Unlock()
	return held, peak, waited, v.batcher.win.limit
}

// HoldWindow takes every free place of v's window, as requests holding decoded input would,
// and returns the function that gives them back (each ended before queueing).
func HoldWindow(v *ModelVersion) (release func()) {
	w := &v.batcher.win
	w.mu.Lock()
	n := w.limit - w.held
	w.mu.Unlock()
	var places []uint64
	for range n {
		p, _ := w.enter(0)
		places = append(places, p)
	}
	return func() {
		for _, p := range places {
			w.resolve(p, nil)
			w.leave()
		}
	}
}

// ServeREST serves ctx's request to v as POST /predictions (v2 false) or POST
// /v2/models/{name}/infer (v2 true) does once the registry has found v, and returns the status.
func ServeREST(d *Daemon, ctx *fasthttp.RequestCtx, v *ModelVersion, v2 bool) int {
	c := restCall(ctx)
	if v2 {
		return d.v2InferVersion(ctx, c, v, time.Now()).status
	}
	return d.predictVersion(ctx, c, v, time.Now()).status
}
