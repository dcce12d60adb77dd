package daemon

import (
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
