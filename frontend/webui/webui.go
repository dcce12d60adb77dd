// Package webui is the web page: a person opens the inference port in a browser, sees the models, tries one
// with a form chosen by its handler, and watches the server work. It is plain HTML, CSS and
// JavaScript embedded in the binary (ui/), so it needs no build step, no CDN and no
// network. enable_ui = false removes its routes.
//
// The page's data comes from two small JSON endpoints that read what the server already
// keeps: /ui/api/models (the registry, as describe) and /ui/api/stats (uiStats, a sampler
// outside the request path). Predictions go through the ordinary inference routes.
//
// With token authorization on, the static files are served without a key (they hold no
// data) and everything else, /ui/api/* included, takes the inference key, which the page
// asks for and keeps in sessionStorage. Management actions are shown only when the
// management port answers the page from the browser, which needs management_allowed_origins
// (CORS, daemon/cors.go) and, with token authorization, the management key.
package webui

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"path"
	"strings"

	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/frontend"
	"github.com/valyala/fasthttp"
)

//go:embed ui
var uiFiles embed.FS

// uiAsset is one embedded file, with what its response headers need.
type uiAsset struct {
	body        []byte
	contentType string
	etag        string
}

// uiAssets are read from uiFiles once: name ("index.html") → asset.
var uiAssets = func() map[string]uiAsset {
	out := map[string]uiAsset{}
	err := fs.WalkDir(uiFiles, "ui", func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		b, err := uiFiles.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		out[strings.TrimPrefix(p, "ui/")] = uiAsset{body: b, contentType: uiContentType(p), etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
		return nil
	})
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	return out
}()

func uiContentType(name string) string {
	switch path.Ext(name) {
	case ".html":
		return "text/html; charset=utf-8"
	case ".js":
		return "text/javascript; charset=utf-8"
	case ".css":
		return "text/css; charset=utf-8"
	case ".svg":
		return "image/svg+xml"
	case ".png":
		return "image/png"
	case ".ico":
		return "image/x-icon"
	}
	return "application/octet-stream"
}

// Page is the web page over the registry. A nil *Page is the page turned off
// (enable_ui = false): it has no routes.
type Page struct {
	Registry *core.Registry
	// TokenAuthorization and Metrics tell the page what the server has on, so that it asks
	// for the inference key and links the metrics.
	TokenAuthorization, Metrics bool
	// Management is the management port the page may call from the browser (ok false: it
	// may not, without management_allowed_origins, or the port is not bound yet).
	Management func() (port int, tls, ok bool)
	stats      uiStats
}

// Routes are the page's routes on the inference port; none when the page is off.
func (pg *Page) Routes() []*frontend.Route {
	if pg == nil {
		return nil
	}
	return []*frontend.Route{
		{Method: "GET", Pattern: "/", Summary: "The web page, for browsers (Accept: text/html); other clients get 405 as before", Handle: pg.uiRoot},
		{Method: "GET", Pattern: "/ui", Summary: "The web page", Handle: pg.uiStatic},
		{Method: "GET", Pattern: "/ui/api/models", Summary: "The web page's model list: versions, handlers, workers, batching, queue and state", Handle: pg.uiModels},
		{Method: "GET", Pattern: "/ui/api/stats", Summary: "The web page's live view: requests/s, p50 and p99 latency, queue depth and batch size per model, every 2 s over 5 minutes", Handle: pg.uiStatsRoute},
		{Method: "GET", Pattern: "/ui/{file...}", Summary: "The web page's scripts and styles", Handle: pg.uiStatic},
	}
}

// uiRoot serves the page at / to browsers only: API clients that GET / keep TorchServe's
// 405, and OPTIONS / stays the API description.
func (pg *Page) uiRoot(ctx *fasthttp.RequestCtx, p frontend.Params) {
	if !strings.Contains(string(ctx.Request.Header.Peek("Accept")), "text/html") {
		frontend.WriteTorchServeError(ctx, 405, "MethodNotAllowedException", "Requested method is not allowed, please refer to API document.")
		return
	}
	pg.uiStatic(ctx, nil)
}

// uiStatic serves an embedded file; the page itself for /ui/. Every response is revalidated
// (Cache-Control: no-cache) against a content ETag, so an upgraded binary is never mixed
// with cached scripts, and an unchanged file costs a 304.
func (pg *Page) uiStatic(ctx *fasthttp.RequestCtx, p frontend.Params) {
	name := "index.html"
	if len(p) > 0 {
		name = p[0]
	}
	a, ok := uiAssets[name]
	if !ok {
		frontend.WriteTorchServeError(ctx, 404, "ResourceNotFoundException", "Requested resource is not found, please refer to API document.")
		return
	}
	h := &ctx.Response.Header
	h.Set("Cache-Control", "no-cache")
	h.Set("ETag", a.etag)
	h.Set("X-Content-Type-Options", "nosniff")
	if strings.HasPrefix(a.contentType, "text/html") {
		// Scripts and styles come from the page's own files only; connect-src allows the
		// management port, another origin. frame-ancestors: no clickjacking of its buttons.
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' blob: data:; connect-src 'self' http: https:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
		h.Set("Referrer-Policy", "no-referrer")
	}
	if string(ctx.Request.Header.Peek("If-None-Match")) == a.etag {
		ctx.SetStatusCode(fasthttp.StatusNotModified)
		return
	}
	ctx.SetContentType(a.contentType)
	ctx.SetBody(a.body)
}

// Public lets the page's static files through without a key when token authorization is
// on: a browser cannot send a header when it opens a URL. The files hold no data; the page
// then asks for the inference key and sends it with every call. Everything else, /ui/api/*
// included, goes to next, which checks the key.
func (pg *Page) Public(next fasthttp.RequestHandler) fasthttp.RequestHandler {
	if pg == nil || !pg.TokenAuthorization {
		return next
	}
	return func(ctx *fasthttp.RequestCtx) {
		if !ctx.IsGet() {
			next(ctx)
			return
		}
		switch p := string(ctx.Path()); {
		case p == "/" && strings.Contains(string(ctx.Request.Header.Peek("Accept")), "text/html"):
			pg.uiStatic(ctx, nil)
		case p == "/ui" || p == "/ui/":
			pg.uiStatic(ctx, nil)
		case strings.HasPrefix(p, "/ui/") && !strings.HasPrefix(p, "/ui/api/"):
			pg.uiStatic(ctx, frontend.Params{p[len("/ui/"):]})
		default:
			next(ctx)
		}
	}
}

// uiModel is one model version as the page lists it.
type uiModel struct {
	Name            string         `json:"name"`
	Version         string         `json:"version"`
	Default         bool           `json:"default"`
	Handler         string         `json:"handler"`
	State           string         `json:"state"` // LOADING, WARMING, READY or NO WORKERS
	Workers         int            `json:"workers"`
	WorkerStatus    map[string]int `json:"workerStatus"`
	MinWorkers      int            `json:"minWorkers"`
	MaxWorkers      int            `json:"maxWorkers"`
	BatchSize       int            `json:"batchSize"`
	MaxBatchDelayMs float64        `json:"maxBatchDelayMs"`
	Queue           int            `json:"queue"`
	QueueCapacity   int            `json:"queueCapacity"`
	Inputs          []uiTensorSpec `json:"inputs"`
}

type uiTensorSpec struct {
	Name  string  `json:"name"`
	DType string  `json:"dtype"`
	Shape []int64 `json:"shape"`
}

// uiManagement tells the page where to probe the management API: its port and scheme on
// the host the page was opened from. It is only sent when management_allowed_origins is set,
// since without CORS the browser could not use it.
type uiManagement struct {
	Port int  `json:"port"`
	TLS  bool `json:"tls"`
}

type uiModelsResponse struct {
	Version            string        `json:"version"`
	TokenAuthorization bool          `json:"tokenAuthorization"`
	Metrics            bool          `json:"metrics"`
	Management         *uiManagement `json:"management"`
	Models             []uiModel     `json:"models"`
}

func (pg *Page) uiModels(ctx *fasthttp.RequestCtx, _ frontend.Params) {
	resp := uiModelsResponse{Version: frontend.Version, TokenAuthorization: pg.TokenAuthorization, Metrics: pg.Metrics, Models: pg.uiModelList()}
	if pg.Management != nil {
		if port, tls, ok := pg.Management(); ok {
			resp.Management = &uiManagement{Port: port, TLS: tls}
		}
	}
	ctx.Response.Header.Set("Cache-Control", "no-store")
	frontend.WriteJSON(ctx, 200, resp)
}

// uiModelList lists every version, loading ones included, sorted by name and version.
func (pg *Page) uiModelList() []uiModel {
	all := pg.Registry.List()
	out := make([]uiModel, 0, len(all))
	for _, e := range all {
		v := e.ModelVersion
		m := uiModel{Name: v.Name, Version: v.Version, Default: e.Default, State: "LOADING", WorkerStatus: map[string]int{}, Inputs: []uiTensorSpec{}}
		if v.State() != core.StateLoading {
			st := v.Stats()
			m.Handler = v.HandlerName
			s := v.Settings()
			m.MinWorkers, m.MaxWorkers = s.MinWorkers, s.MaxWorkers
			m.BatchSize = st.BatchSize
			m.MaxBatchDelayMs = float64(st.MaxDelay) / 1e6
			m.Queue, m.QueueCapacity = st.Pending, st.Capacity
			for _, w := range v.Workers() {
				m.WorkerStatus[w.Status]++
				if w.Status != "STUCK" {
					m.Workers++
				}
			}
			switch {
			case v.State() == core.StateWarming:
				m.State = "WARMING"
			case m.Workers == 0:
				m.State = "NO WORKERS"
			default:
				m.State = "READY"
			}
			for _, in := range v.Archive().Config.Inputs {
				m.Inputs = append(m.Inputs, uiTensorSpec{Name: in.Name, DType: in.DType, Shape: in.Shape})
			}
		}
		out = append(out, m)
	}
	return out
}
