package daemon

import (
	"regexp"
	"sort"
	"strings"

	"github.com/valyala/fasthttp"
)

// Version is reported in the API description; cmd/torchd sets it.
var Version = "dev"

var pathParam = regexp.MustCompile(`\{(\w+)(\.\.\.)?\}`)

// openAPI describes the router's routes as an OpenAPI 3.0.1 document. It is generated from
// the same table the router serves, so the two cannot drift apart.
func (rt *router) openAPI(version string) map[string]any {
	paths := map[string]map[string]any{}
	for _, r := range rt.routes {
		p := pathParam.ReplaceAllString(r.pattern, "{$1}")
		ops := paths[p]
		if ops == nil {
			ops = map[string]any{}
			paths[p] = ops
		}
		var params []map[string]any
		for _, m := range pathParam.FindAllStringSubmatch(r.pattern, -1) {
			params = append(params, map[string]any{
				"name": m[1], "in": "path", "required": true, "schema": map[string]string{"type": "string"},
			})
		}
		op := map[string]any{
			"operationId": strings.ToLower(r.method) + strings.NewReplacer("/", "_", "{", "", "}", "", ".", "", "-", "_").Replace(r.pattern),
			"summary":     r.summary,
			"responses": map[string]any{
				"200":     map[string]string{"description": "success"},
				"default": map[string]any{"description": "error", "content": map[string]any{"application/json": map[string]any{"schema": map[string]any{"$ref": "#/components/schemas/Error"}}}},
			},
		}
		if params != nil {
			op["parameters"] = params
		}
		ops[strings.ToLower(r.method)] = op
	}
	return map[string]any{
		"openapi": "3.0.1",
		"info":    map[string]string{"title": "torchd " + rt.api + " API", "version": version},
		"paths":   paths,
		"components": map[string]any{"schemas": map[string]any{"Error": map[string]any{
			"type":     "object",
			"required": []string{"code", "type", "message"},
			"properties": map[string]any{
				"code":    map[string]string{"type": "integer"},
				"type":    map[string]string{"type": "string"},
				"message": map[string]string{"type": "string"},
			},
		}}},
	}
}

// describeAPI answers OPTIONS / and GET /api-description, as TorchServe does.
func (rt *router) describeAPI(ctx *fasthttp.RequestCtx, _ params) {
	writeJSON(ctx, 200, rt.openAPI(Version))
}

// withDescription adds the API-description routes to a route table; they describe
// themselves too.
func withDescription(api string, routes []*route) *router {
	rt := newRouter(api, nil)
	routes = append(routes,
		&route{method: "OPTIONS", pattern: "/", summary: "This OpenAPI document", handle: rt.describeAPI},
		&route{method: "GET", pattern: "/api-description", summary: "This OpenAPI document", handle: rt.describeAPI},
	)
	*rt = *newRouter(api, routes)
	return rt
}

// RoutePaths lists "METHOD pattern" for every route, sorted; tests compare it with the
// OpenAPI document.
func (rt *router) RoutePaths() []string {
	out := make([]string, 0, len(rt.routes))
	for _, r := range rt.routes {
		out = append(out, r.method+" "+pathParam.ReplaceAllString(r.pattern, "{$1}"))
	}
	sort.Strings(out)
	return out
}
