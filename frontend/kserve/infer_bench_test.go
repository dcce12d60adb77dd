package kserve_test

import (
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/torchd/torchd/core/coretest"
	"github.com/torchd/torchd/frontend"
	"github.com/torchd/torchd/frontend/kserve"
)

// BenchmarkV2InferJSON is a tiny v2 JSON infer through the routes, in a reused
// fasthttp.RequestCtx as the server hands it, over coretest's runtime (a forward of two
// floats): the front-end's decode, core's request path and the encode, without a socket.
func BenchmarkV2InferJSON(b *testing.B) {
	r := coretest.NewRegistry(b, &coretest.Runtime{})
	coretest.Add(b, r, "m", coretest.Archive(b, "tensor", "batch_size = 1\n"+coretest.XConfig, nil))
	api := &kserve.API{Registry: r, MaxRequestSize: 1 << 20}
	router := frontend.NewRouter("inference", api.Routes())
	body := []byte(`{"id":"1","inputs":[{"name":"x","shape":[1,2],"datatype":"FP32","data":[1.5,-2]}]}`)
	var ctx fasthttp.RequestCtx
	b.ReportAllocs()
	for b.Loop() {
		ctx.Request.Reset()
		ctx.Response.Reset()
		ctx.Request.Header.SetMethod("POST")
		ctx.Request.SetRequestURI("/v2/models/m/infer")
		ctx.Request.Header.SetContentType("application/json")
		ctx.Request.SetBody(body)
		router.Serve(&ctx)
		if ctx.Response.StatusCode() != 200 {
			b.Fatalf("%d %s", ctx.Response.StatusCode(), ctx.Response.Body())
		}
	}
}
