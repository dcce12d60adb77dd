package frontend

import (
	"slices"
	"strings"
	"testing"
)

// match takes a path's parameters in pattern order, only for the pattern that matches whole.
func TestMatch(t *testing.T) {
	for _, c := range []struct {
		pattern, path string
		want          Params
		ok            bool
	}{
		{"/ping", "/ping", nil, true},
		{"/ping", "/pong", nil, false},
		{"/v2/models/{model_name}/infer", "/v2/models/m/infer", Params{"m"}, true},
		{"/v2/models/{model_name}/versions/{model_version}/infer", "/v2/models/m/versions/2/infer", Params{"m", "2"}, true},
		{"/v2/models/{model_name}/infer", "/v2/models/m/ready", nil, false},
		{"/v2/models/{model_name}/infer", "/v2/models/m/infer/x", nil, false},
		{"/v2/models/{model_name}", "/v2/models", nil, false},
		{"/v2/models/{model_name}", "/v2/models//", nil, false},
		{"/v1/models/{model_name}:predict", "/v1/models/digits:predict", Params{"digits"}, true},
		{"/v1/models/{model_name}:predict", "/v1/models/:predict", nil, false},
		{"/v1/models/{model_name}:predict", "/v1/models/digits:explain", nil, false},
		{"/debug/pprof/{profile...}", "/debug/pprof/", Params{""}, true},
		{"/debug/pprof/{profile...}", "/debug/pprof/heap/x", Params{"heap/x"}, true},
		{"/debug/pprof/{profile...}", "/debug", nil, false},
	} {
		p, ok := match(strings.Split(strings.Trim(c.pattern, "/"), "/"), splitPath(c.path))
		if ok != c.ok || !slices.Equal(p, c.want) {
			t.Errorf("match(%s, %s) = %q, %v; want %q, %v", c.pattern, c.path, p, ok, c.want, c.ok)
		}
	}
}
