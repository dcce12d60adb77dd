package daemon

import (
	"slices"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/pprofhandler"

	"github.com/torchd/torchd/frontend"
	"github.com/torchd/torchd/frontend/kserve"
	"github.com/torchd/torchd/frontend/openai"
	"github.com/torchd/torchd/frontend/torchserve"
	"github.com/torchd/torchd/frontend/webui"
)

// frontEnds builds the protocol front-ends over the registry, each given what it uses.
// Start adds the tracer, once it exists.
func (d *Daemon) frontEnds() {
	d.ts = &torchserve.API{Registry: d.Registry, Life: d.Life, InitialWorkers: d.cfg.InitialWorkers, Ready: d.Life.Ready, MaxRequestSize: d.cfg.MaxRequestSize, Log: d.log}
	d.openai = &openai.API{Registry: d.Registry}
	d.kserve = &kserve.API{Registry: d.Registry, Life: d.Life, Ready: d.Life.Ready,
		MaxRequestSize: d.cfg.MaxRequestSize, LogLevel: d.logLevel}
	if d.cfg.EnableUI {
		d.page = &webui.Page{Registry: d.Registry, Metrics: d.cfg.EnableMetrics, Management: d.managementPort}
	}
}

// inferenceRouter is the inference port's routes: TorchServe's inference API, OpenAI's
// embeddings, KServe v1 and v2 with Triton's extensions, and the web page.
func (d *Daemon) inferenceRouter() *frontend.Router {
	return frontend.Describe("inference", slices.Concat(d.ts.InferenceRoutes(), d.openai.Routes(), d.kserve.Routes(), d.page.Routes()))
}

// managementRouter is the management port's routes: TorchServe's management API, the key
// rotation of token authorization, and Go's profiles.
func (d *Daemon) managementRouter() *frontend.Router {
	return frontend.Describe("management", append(d.ts.ManagementRoutes(),
		&frontend.Route{Method: "GET", Pattern: "/token", Summary: "Rotate a key (token authorization): type=management|inference, authorized by the API key", Handle: d.token},
		&frontend.Route{Method: "GET", Pattern: "/debug/pprof/{profile...}", Summary: "Go pprof profiles", Handle: func(ctx *fasthttp.RequestCtx, _ frontend.Params) { pprofhandler.PprofHandler(ctx) }},
	))
}
