package daemon

import (
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/torchd/torchd/frontend"
)

// Every route the servers register appears in their OpenAPI documents, and the reverse.
func TestOpenAPIListsEveryRoute(t *testing.T) {
	d := New(&Config{}, nil)
	for _, rt := range []*frontend.Router{d.inferenceRouter(), d.managementRouter()} {
		doc := rt.OpenAPI("test")
		var documented []string
		for p, ops := range doc["paths"].(map[string]map[string]any) {
			for m := range ops {
				documented = append(documented, strings.ToUpper(m)+" "+p)
			}
		}
		sort.Strings(documented)
		served := rt.RoutePaths()
		if strings.Join(served, "\n") != strings.Join(documented, "\n") {
			t.Errorf("%s API: routes\n%s\ndocumented\n%s", rt.API(), strings.Join(served, "\n"), strings.Join(documented, "\n"))
		}
		if doc["openapi"] != "3.0.1" {
			t.Errorf("openapi version %v", doc["openapi"])
		}
	}
}

// With the page on, its routes are in the OpenAPI document too.
func TestUIRoutesDescribed(t *testing.T) {
	d := New(&Config{EnableUI: true}, nil)
	rt := d.inferenceRouter()
	served := rt.RoutePaths()
	doc := rt.OpenAPI("test")["paths"].(map[string]map[string]any)
	for _, want := range []string{"GET /", "GET /ui", "GET /ui/api/models", "GET /ui/api/stats", "GET /ui/{file}"} {
		if !slices.Contains(served, want) {
			t.Errorf("%s is not served: %v", want, served)
		}
		method, path, _ := strings.Cut(want, " ")
		if doc[path][strings.ToLower(method)] == nil {
			t.Errorf("%s is not documented", want)
		}
	}
	if slices.Contains(New(&Config{}, nil).inferenceRouter().RoutePaths(), "GET /ui/api/stats") {
		t.Error("enable_ui = false still serves the page")
	}
}
