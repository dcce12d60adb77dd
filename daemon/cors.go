package daemon

import (
	"slices"

	"github.com/valyala/fasthttp"
)

// allowOrigins answers CORS for the management API, so that the web page, served from the
// inference port (another origin), can call it from the browser. It is off unless
// management_allowed_origins lists origins ("*": any). Only listed origins get the
// Access-Control-Allow-* headers; a preflight (OPTIONS with Access-Control-Request-Method)
// from one is answered here, before the key check, since a browser sends no Authorization
// header with it. Every actual request still goes through next, token authorization
// included.
func (d *Daemon) allowOrigins(next fasthttp.RequestHandler) fasthttp.RequestHandler {
	allowed := d.cfg.ManagementOrigins
	if len(allowed) == 0 {
		return next
	}
	return func(ctx *fasthttp.RequestCtx) {
		origin := string(ctx.Request.Header.Peek("Origin"))
		h := &ctx.Response.Header
		h.Add("Vary", "Origin")
		if origin == "" || !slices.Contains(allowed, origin) && !slices.Contains(allowed, "*") {
			next(ctx)
			return
		}
		h.Set("Access-Control-Allow-Origin", origin)
		if ctx.IsOptions() && len(ctx.Request.Header.Peek("Access-Control-Request-Method")) > 0 {
			h.Set("Access-Control-Allow-Methods", "GET, POST, PUT, DELETE")
			h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type")
			h.Set("Access-Control-Max-Age", "600")
			ctx.SetStatusCode(fasthttp.StatusNoContent)
			return
		}
		next(ctx)
	}
}
