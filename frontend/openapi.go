package frontend

import (
	"regexp"
	"sort"
	"strings"

	"github.com/valyala/fasthttp"
)

// Version is torchd's version, which the API description, the server metadata of the Open
// Inference Protocol and the web page report; cmd/torchd sets it.
var Version = "dev"

var pathParam = regexp.MustCompile(`\{(\w+)(\.\.\.)?\}`)

// OpenAPI describes the router's routes as an OpenAPI 3.0.1 document. It is generated from
// the same table the router serves, so the two cannot drift apart.
func (rt *Router) OpenAPI(version string) map[string]any {
	paths := map[string]map[string]any{}
	for _, r := range rt.routes {
		p := pathParam.ReplaceAllString(r.Pattern, "{$1}")
		ops := paths[p]
		if ops == nil {
			ops = map[string]any{}
			paths[p] = ops
		}
		var Params []map[string]any
		for _, m := range pathParam.FindAllStringSubmatch(r.Pattern, -1) {
			Params = append(Params, map[string]any{
				"name": m[1], "in": "path", "required": true, "schema": map[string]string{"type": "string"},
			})
		}
		op := map[string]any{
			"operationId": strings.ToLower(r.Method) + strings.NewReplacer("/", "_", "{", "", "}", "", ".", "", "-", "_").Replace(r.Pattern),
			"summary":     r.Summary,
			"responses": map[string]any{
				"200":     map[string]string{"description": "success"},
				"default": map[string]any{"description": "error", "content": map[string]any{"application/json": map[string]any{"schema": map[string]any{"$ref": "#/components/schemas/Error"}}}},
			},
		}
		if Params != nil {
			op["parameters"] = Params
		}
		ops[strings.ToLower(r.Method)] = op
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
func (rt *Router) describeAPI(ctx *fasthttp.RequestCtx, _ Params) {
	WriteJSON(ctx, 200, rt.OpenAPI(Version))
}

// Describe adds the API-description routes to a route table; they describe
// themselves too.
func Describe(api string, routes []*Route) *Router {
	rt := NewRouter(api, nil)
	routes = append(routes,
		&Route{Method: "OPTIONS", Pattern: "/", Summary: "This OpenAPI document", Handle: rt.describeAPI},
		&Route{Method: "GET", Pattern: "/api-description", Summary: "This OpenAPI document", Handle: rt.describeAPI},
	)
	*rt = *NewRouter(api, routes)
	return rt
}

// API is the router's API name, the OpenAPI title's.
func (rt *Router) API() string { return rt.api }

// RoutePaths lists "METHOD pattern" for every route, sorted; tests compare it with the
// OpenAPI document.
func (rt *Router) RoutePaths() []string {
	out := make([]string, 0, len(rt.routes))
	for _, r := range rt.routes {
		out = append(out, r.Method+" "+pathParam.ReplaceAllString(r.Pattern, "{$1}"))
	}
	sort.Strings(out)
	return out
}
