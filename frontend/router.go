package frontend

import (
	"strings"

	"github.com/valyala/fasthttp"
)

// Params are a matched route's path parameters, in pattern order.
type Params []string

// Route is one endpoint. The router and the OpenAPI document are both built from the
// route tables, so the document lists exactly what is served.
type Route struct {
	Method  string // "*" matches any method
	Pattern string // "/models/{model_name}/{model_version}"; "{x}:verb" ends in a verb; a last "{x...}" takes the rest
	Summary string
	Handle  func(ctx *fasthttp.RequestCtx, p Params)
	// Unauthorized answers a request this route refused for its key (token authorization)
	// in the shape of the route's API; nil: TorchServe's (WriteTorchServeError).
	Unauthorized func(ctx *fasthttp.RequestCtx, msg string)
}

// WithUnauthorized sets each route's Unauthorized to answer, for an API to answer refused
// keys in its own shape; it returns routes.
func WithUnauthorized(routes []*Route, answer func(ctx *fasthttp.RequestCtx, msg string)) []*Route {
	for _, r := range routes {
		r.Unauthorized = answer
	}
	return routes
}

// Router matches a path's segments against its routes in order.
type Router struct {
	routes []*Route
	segs   [][]string // each route's pattern split; the routes themselves are never written
	api    string     // "inference" or "management", for the OpenAPI title
}

// NewRouter is a router over routes, matched in order.
func NewRouter(api string, routes []*Route) *Router {
	segs := make([][]string, len(routes))
	for i, r := range routes {
		if r.Pattern != "/" {
			segs[i] = strings.Split(strings.Trim(r.Pattern, "/"), "/")
		}
	}
	return &Router{routes: routes, segs: segs, api: api}
}

func splitPath(p string) []string {
	p = strings.Trim(p, "/")
	if p == "" {
		return nil
	}
	return strings.Split(p, "/")
}

// Serve answers ctx with the first route whose pattern and method match; TorchServe's 404
// or 405 otherwise.
func (rt *Router) Serve(ctx *fasthttp.RequestCtx) {
	segs := splitPath(string(ctx.Path()))
	method := string(ctx.Method())
	pathMatched := false
	for i, r := range rt.routes {
		p, ok := match(rt.segs[i], segs)
		if !ok {
			continue
		}
		pathMatched = true
		if r.Method == "*" || r.Method == method {
			r.Handle(ctx, p)
			return
		}
	}
	if pathMatched {
		WriteTorchServeError(ctx, 405, "MethodNotAllowedException", "Requested method is not allowed, please refer to API document.")
		return
	}
	WriteTorchServeError(ctx, 404, "ResourceNotFoundException", "Requested resource is not found, please refer to API document.")
}

// Unauthorized answers a request refused for its key in the shape of the API that owns its
// path: the first route whose pattern matches it, whatever its method. A path no route
// matches is answered as the router answers it, in TorchServe's shape: 400
// InvalidKeyException, TorchServe's answer to a refused key.
func (rt *Router) Unauthorized(ctx *fasthttp.RequestCtx, msg string) {
	segs := splitPath(string(ctx.Path()))
	for i, r := range rt.routes {
		if _, ok := match(rt.segs[i], segs); ok && r.Unauthorized != nil {
			r.Unauthorized(ctx, msg)
			return
		} else if ok {
			break
		}
	}
	WriteTorchServeError(ctx, 400, "InvalidKeyException", msg)
}

func match(pattern, segs []string) (Params, bool) {
	// The routes are tried in order, and most fail after a parameter or two: a first pass
	// matches without collecting, so only the route that serves allocates its Params.
	n, ok := walk(pattern, segs, nil)
	if !ok || n == 0 {
		return nil, ok
	}
	p := make(Params, 0, n)
	walk(pattern, segs, &p)
	return p, true
}

// walk matches segs against pattern and returns the number of its parameters, appending
// them to p unless p is nil.
func walk(pattern, segs []string, p *Params) (int, bool) {
	n := 0
	add := func(v string) {
		n++
		if p != nil {
			*p = append(*p, v)
		}
	}
	for i, ps := range pattern {
		if strings.HasSuffix(ps, "...}") {
			// The rest may be empty: "/debug/pprof/" is pprof's index.
			if i > len(segs) {
				return 0, false
			}
			if p == nil {
				return n + 1, true
			}
			add(strings.Join(segs[i:], "/"))
			return n, true
		}
		if i >= len(segs) {
			return 0, false
		}
		if strings.HasPrefix(ps, "{") {
			// "{model_name}:predict" matches "digits:predict" (KServe v1's verbs).
			if j := strings.Index(ps, "}:"); j >= 0 {
				suffix := ps[j+1:]
				v, ok := strings.CutSuffix(segs[i], suffix)
				if !ok || v == "" {
					return 0, false
				}
				add(v)
				continue
			}
			if segs[i] == "" {
				return 0, false
			}
			add(segs[i])
			continue
		}
		if ps != segs[i] {
			return 0, false
		}
	}
	if len(segs) != len(pattern) {
		return 0, false
	}
	return n, true
}
