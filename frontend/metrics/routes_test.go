package metrics

import (
	"encoding/json"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/torchd/torchd/frontend"
)

// The metrics port describes itself at OPTIONS /, as TorchServe's does, and answers what it
// does not serve in TorchServe's error shape.
func TestMetricsAPIDescription(t *testing.T) {
	router := frontend.Describe("metrics", New(true).Routes())
	serve := func(method, uri string) (int, map[string]any) {
		var ctx fasthttp.RequestCtx
		ctx.Request.Header.SetMethod(method)
		ctx.Request.SetRequestURI(uri)
		router.Serve(&ctx)
		var body map[string]any
		if err := json.Unmarshal(ctx.Response.Body(), &body); err != nil {
			t.Fatalf("%s %s: %d %q: %v", method, uri, ctx.Response.StatusCode(), ctx.Response.Body(), err)
		}
		return ctx.Response.StatusCode(), body
	}
	status, doc := serve("OPTIONS", "/")
	paths, _ := doc["paths"].(map[string]any)
	metrics, _ := paths["/metrics"].(map[string]any)
	if status != 200 || doc["openapi"] != "3.0.1" || metrics["get"] == nil {
		t.Fatalf("OPTIONS / on the metrics port: %d %v", status, doc)
	}
	for _, c := range []struct {
		method, uri string
		status      int
		typ         string
	}{{"GET", "/nope", 404, "ResourceNotFoundException"}, {"POST", "/metrics", 405, "MethodNotAllowedException"}} {
		if status, e := serve(c.method, c.uri); status != c.status || e["code"] != float64(c.status) || e["type"] != c.typ {
			t.Errorf("%s %s: %d %v, want %d %s", c.method, c.uri, status, e, c.status, c.typ)
		}
	}
}
