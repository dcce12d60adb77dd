package daemon

// Hooks into the engine for the end-to-end tests of package daemon_test.

import (
	"github.com/torchd/torchd/frontend"
	"github.com/valyala/fasthttp"
)

// WindowStats returns v's window: places held now, the most held at once, the requests that
// waited for one, and its size.
func WindowStats(v *ModelVersion) (held, peak, waited, size int) {
	s := v.Stats()
	return s.WindowHeld, s.WindowPeak, s.WindowWaited, s.WindowSize
}

// ServeREST serves ctx's request to v as POST /predictions/{name}/{version} (v2 false) or
// POST /v2/models/{name}/versions/{version}/infer (v2 true) does, and returns the status.
func ServeREST(d *Daemon, ctx *fasthttp.RequestCtx, v *ModelVersion, v2 bool) int {
	if v2 {
		d.v2Infer(ctx, frontend.Params{v.Name, v.Version})
	} else {
		d.predict(ctx, v.Name, v.Version)
	}
	return ctx.Response.StatusCode()
}
