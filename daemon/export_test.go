package daemon

// Hooks into the engine for the end-to-end tests of package daemon_test.

import (
	"github.com/valyala/fasthttp"
)

// WindowStats returns v's window: places held now, the most held at once, the requests that
// waited for one, and its size.
func WindowStats(v *ModelVersion) (held, peak, waited, size int) {
	s := v.Stats()
	return s.WindowHeld, s.WindowPeak, s.WindowWaited, s.WindowSize
}

// ServeREST serves ctx's request to v as POST /predictions/{name}/{version} (v2 false) or
// POST /v2/models/{name}/versions/{version}/infer (v2 true) does, through the inference
// API's router, and returns the status.
func ServeREST(d *Daemon, ctx *fasthttp.RequestCtx, v *ModelVersion, v2 bool) int {
	path := "/predictions/" + v.Name + "/" + v.Version
	if v2 {
		path = "/v2/models/" + v.Name + "/versions/" + v.Version + "/infer"
	}
	ctx.Request.Header.SetMethod("POST")
	ctx.Request.SetRequestURI(path)
	d.inferenceRouter().Serve(ctx)
	return ctx.Response.StatusCode()
}
