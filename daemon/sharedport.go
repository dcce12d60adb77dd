package daemon

import (
	"strings"

	"github.com/valyala/fasthttp"
)

// sharedPort serves the inference and management APIs on one listener, as TorchServe does
// when config.properties gives them one address (KServe's examples do): the management
// API's paths (/models, /token, /debug/pprof) go to management, with its authorization, CORS
// and counting, and everything else to inference.
func sharedPort(inference, management fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		p := string(ctx.Path())
		first, _, _ := strings.Cut(strings.TrimPrefix(p, "/"), "/")
		switch first {
		case "models", "token", "debug":
			management(ctx)
		default:
			inference(ctx)
		}
	}
}
