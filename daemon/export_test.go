package daemon

// Hooks into the engine for the end-to-end tests of package daemon_test.

import (
	"time"

	"github.com/valyala/fasthttp"
)

// WindowStats returns v's window: places held now, the most held at once, the requests that
// waited for one, and its size.
func WindowStats(v *ModelVersion) (held, peak, waited, size int) {
	s := v.Stats()
	return s.WindowHeld, s.WindowPeak, s.WindowWaited, s.WindowSize
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
