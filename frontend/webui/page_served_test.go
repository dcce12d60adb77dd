package webui_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/backends/libtorch"
	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/core/coretest"
	"github.com/torchd/torchd/frontend"
	"github.com/torchd/torchd/frontend/torchserve"
	"github.com/torchd/torchd/frontend/webui"
)

// The page over a registry serving the zoo's digits CNN (models/out, made by `make models`)
// over real LibTorch, beside TorchServe's inference API, as the daemon's inference port
// serves them. Token authorization's key check and CORS are the daemon's (auth.go, cors.go:
// its TestWebPageAuthorization); here a stand-in for the key check shows what the page lets
// through without it.

type page struct {
	pg     *webui.Page
	router *frontend.Router
	// public is the inference port with token authorization on: the page's Public in front of
	// a key check that refuses everything.
	public fasthttp.RequestHandler
}

func newPage(t *testing.T) *page {
	zoo := filepath.Join("..", "..", "models", "out", "digits")
	dir := t.TempDir()
	if _, err := archive.Write(archive.WriteOptions{ModelName: "digits", Version: "1.0", SerializedFile: filepath.Join(zoo, "model.pt"),
		ExtraFiles: []string{filepath.Join(zoo, "index_to_name.json")}, ConfigFile: filepath.Join("..", "..", "models", "configs", "digits.toml"),
		ExportPath: dir, Format: archive.FormatNoArchive}); err != nil {
		t.Fatalf("digits (run make models): %v", err)
	}
	am, err := archive.Open(filepath.Join(dir, "digits"))
	if err != nil {
		t.Fatal(err)
	}
	reg := coretest.NewRegistryOf(t, libtorch.Backend{})
	if _, err := reg.Add("digits", "1.0", core.RegisterRequest{Name: "digits", Synchronous: true}, am); err != nil {
		t.Fatal(err)
	}
	p := &page{pg: &webui.Page{Registry: reg, TokenAuthorization: true}}
	ts := &torchserve.API{Registry: reg, Ready: func() bool { return true }, MaxRequestSize: 1 << 20, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	p.router = frontend.NewRouter("inference", slices.Concat(ts.InferenceRoutes(), p.pg.Routes()))
	p.public = p.pg.Public(func(ctx *fasthttp.RequestCtx) {
		frontend.WriteTorchServeError(ctx, 400, "InvalidKeyException", "the stand-in for the inference key's check")
	})
	return p
}

type answer struct {
	status int
	header *fasthttp.ResponseHeader
	body   []byte
}

func serve(h fasthttp.RequestHandler, method, uri string, header ...string) answer {
	var ctx fasthttp.RequestCtx
	ctx.Request.Header.SetMethod(method)
	ctx.Request.SetRequestURI(uri)
	for i := 0; i+1 < len(header); i += 2 {
		ctx.Request.Header.Set(header[i], header[i+1])
	}
	h(&ctx)
	a := answer{status: ctx.Response.StatusCode(), header: &fasthttp.ResponseHeader{}, body: append([]byte(nil), ctx.Response.Body()...)}
	ctx.Response.Header.CopyTo(a.header)
	return a
}

// The page's static files: content types, revalidation by ETag, the page's security
// headers, 404 for a file it has not; served without a key under token authorization,
// while its JSON, OPTIONS / and GET / for an API client go on to the key check.
func TestPageFiles(t *testing.T) {
	p := newPage(t)
	for _, c := range []struct{ path, accept, contentType string }{
		{"/", "text/html,application/xhtml+xml", "text/html; charset=utf-8"},
		{"/ui/", "", "text/html; charset=utf-8"},
		{"/ui", "", "text/html; charset=utf-8"},
		{"/ui/app.js", "", "text/javascript; charset=utf-8"},
		{"/ui/style.css", "", "text/css; charset=utf-8"},
		{"/ui/favicon.svg", "", "image/svg+xml"},
	} {
		for name, h := range map[string]fasthttp.RequestHandler{"routes": p.router.Serve, "without a key": p.public} {
			r := serve(h, "GET", c.path, "Accept", c.accept)
			if r.status != 200 || string(r.header.ContentType()) != c.contentType || string(r.header.Peek("Cache-Control")) != "no-cache" || len(r.header.Peek("ETag")) == 0 {
				t.Errorf("GET %s (%s): %d %s", c.path, name, r.status, r.header)
			}
			if r2 := serve(h, "GET", c.path, "Accept", c.accept, "If-None-Match", string(r.header.Peek("ETag"))); r2.status != 304 || len(r2.body) != 0 {
				t.Errorf("GET %s (%s) with its ETag: %d, %d bytes", c.path, name, r2.status, len(r2.body))
			}
		}
	}
	if r := serve(p.public, "GET", "/", "Accept", "text/html"); !strings.Contains(string(r.body), "<title>torchd</title>") ||
		!strings.Contains(string(r.header.Peek("Content-Security-Policy")), "frame-ancestors 'none'") || string(r.header.Peek("X-Content-Type-Options")) != "nosniff" {
		t.Errorf("GET / for a browser: %d %s", r.status, r.header)
	}
	if r := serve(p.router.Serve, "GET", "/ui/nothing.js"); r.status != 404 || !strings.Contains(string(r.body), "ResourceNotFoundException") {
		t.Errorf("GET /ui/nothing.js: %d %s", r.status, r.body)
	}
	// An API client's GET / keeps TorchServe's 405.
	if r := serve(p.router.Serve, "GET", "/"); r.status != 405 || !strings.Contains(string(r.body), "MethodNotAllowedException") {
		t.Errorf("GET / for an API client: %d %s", r.status, r.body)
	}
	// The rest goes to the key check.
	for _, c := range [][]string{{"GET", "/ui/api/models"}, {"GET", "/ui/api/stats"}, {"GET", "/ui/api/nothing"}, {"GET", "/"}, {"OPTIONS", "/"}, {"POST", "/ui/app.js"}} {
		if r := serve(p.public, c[0], c[1]); r.status != 400 || !strings.Contains(string(r.body), "InvalidKeyException") {
			t.Errorf("%s %s without a key: %d %s", c[0], c[1], r.status, r.body)
		}
	}
}

// The page's model list and live view over a real model: requests show up in the live view
// within two samples.
func TestPageModelsAndStats(t *testing.T) {
	p := newPage(t)
	var info struct {
		TokenAuthorization bool
		Management         *struct{ Port int }
		Models             []struct {
			Name, Version, Handler, State string
			Workers, BatchSize            int
		}
	}
	if err := json.Unmarshal(serve(p.router.Serve, "GET", "/ui/api/models").body, &info); err != nil {
		t.Fatal(err)
	}
	if !info.TokenAuthorization || info.Management != nil {
		t.Errorf("models: %+v (no management port given)", info)
	}
	if len(info.Models) != 1 || info.Models[0].Name != "digits" || info.Models[0].Handler != "image_classifier" ||
		info.Models[0].State != "READY" || info.Models[0].Workers != 1 || info.Models[0].BatchSize != 32 {
		t.Errorf("models: %+v", info.Models)
	}

	png, err := os.ReadFile(filepath.Join("..", "..", "models", "out", "digits", "sample.png"))
	if err != nil {
		t.Fatal(err)
	}
	if r := serve(p.router.Serve, "GET", "/ui/api/stats"); r.status != 200 || string(r.header.Peek("Cache-Control")) != "no-store" { // starts the sampler
		t.Fatalf("stats: %d %s", r.status, r.header)
	}
	var last string
	coretest.WaitFor(t, "requests in the live view", func() bool {
		for range 20 {
			var ctx fasthttp.RequestCtx
			ctx.Request.Header.SetMethod("POST")
			ctx.Request.SetRequestURI("/predictions/digits")
			ctx.Request.Header.SetContentType("image/png")
			ctx.Request.SetBody(png)
			p.router.Serve(&ctx)
			if ctx.Response.StatusCode() != 200 {
				t.Fatalf("predict: %d %s", ctx.Response.StatusCode(), ctx.Response.Body())
			}
		}
		var st struct {
			Models []struct {
				Name       string
				RPS, P50Ms []*float64
				Batch      []*float64
			}
		}
		body := serve(p.router.Serve, "GET", "/ui/api/stats").body
		last = string(body)
		if json.Unmarshal(body, &st) != nil || len(st.Models) != 1 || len(st.Models[0].RPS) == 0 {
			return false
		}
		m := st.Models[0]
		i := len(m.RPS) - 1
		return m.RPS[i] != nil && *m.RPS[i] > 0 && m.P50Ms[i] != nil && *m.P50Ms[i] > 0 && m.Batch[i] != nil && *m.Batch[i] >= 1
	})
	t.Logf("live view: %.300s", last)
}

// A nil page (enable_ui = false) has no routes: /ui/* is unknown, and GET / is TorchServe's
// 405 beside the API description.
func TestPageOff(t *testing.T) {
	var off *webui.Page
	router := frontend.Describe("inference", off.Routes())
	for _, path := range []string{"/ui/", "/ui/app.js", "/ui/api/models", "/ui/api/stats"} {
		if r := serve(router.Serve, "GET", path, "Accept", "text/html"); r.status != 404 || !strings.Contains(string(r.body), "ResourceNotFoundException") {
			t.Errorf("GET %s: %d %s", path, r.status, r.body)
		}
	}
	if r := serve(off.Public(router.Serve), "GET", "/", "Accept", "text/html"); r.status != 405 || !strings.Contains(string(r.body), "MethodNotAllowedException") {
		t.Errorf("GET / for a browser with the page off: %d %s", r.status, r.body)
	}
}
