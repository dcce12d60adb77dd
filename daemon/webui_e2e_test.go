package daemon_test

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func get(t *testing.T, url string, header ...string) response {
	t.Helper()
	req := must(t, "GET", url, "", nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	return send(t, req)
}

// With token authorization, the page's static files need no key (a browser cannot send one
// when it opens a URL), everything else, the page's JSON included, needs the inference key,
// and OPTIONS / stays the protected API description. The management API answers CORS only
// for the listed origin; a preflight needs no key, the actual request does. What the page
// serves is frontend/webui's (TestPageFiles, TestPageModelsAndStats, TestPageOff).
func TestWebPageAuthorization(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "keys.json")
	const origin = "http://page.example:8080"
	s := startServer(t, "--enable-token-authorization", "--key-file", keyFile, "--models", "digits=digits.mar",
		"--management-allowed-origins", origin)
	s.waitHealthy(t)
	k := readKeys(t, keyFile)
	bearer := func(key string) []string { return []string{"Authorization", "Bearer " + key} }
	for _, path := range []string{"/ui/app.js", "/ui/"} {
		if r := get(t, s.inf+path); r.status != 200 {
			t.Errorf("GET %s without a key: %d", path, r.status)
		}
	}
	for _, path := range []string{"/ui/api/models", "/ui/api/stats", "/ui/api/nothing"} {
		for _, key := range []string{"", "wrong", k.Management.Key, k.API.Key} {
			errorShape(t, get(t, s.inf+path, bearer(key)...), 400, "InvalidKeyException", "inference key")
		}
	}
	errorShape(t, get(t, s.inf+"/"), 400, "InvalidKeyException", "inference key") // not a browser
	errorShape(t, send(t, must(t, "OPTIONS", s.inf+"/", "", nil)), 400, "InvalidKeyException", "inference key")
	errorShape(t, get(t, s.inf+"/", bearer(k.Inference.Key)...), 405, "MethodNotAllowedException", "")
	var info struct{ Management *struct{ Port int } }
	get(t, s.inf+"/ui/api/models", bearer(k.Inference.Key)...).json(t, &info)
	if info.Management == nil || !strings.HasSuffix(s.mgmt, ":"+strconv.Itoa(info.Management.Port)) {
		t.Errorf("models: %+v (management %s)", info, s.mgmt)
	}

	// CORS on the management API: the preflight of an allowed origin, without a key.
	pre := must(t, "OPTIONS", s.mgmt+"/models/digits", "", nil)
	pre.Header.Set("Origin", origin)
	pre.Header.Set("Access-Control-Request-Method", "PUT")
	pre.Header.Set("Access-Control-Request-Headers", "authorization")
	r := send(t, pre)
	if r.status != 204 || r.header.Get("Access-Control-Allow-Origin") != origin ||
		!strings.Contains(r.header.Get("Access-Control-Allow-Headers"), "Authorization") || !strings.Contains(r.header.Get("Access-Control-Allow-Methods"), "PUT") {
		t.Errorf("preflight: %d %v", r.status, r.header)
	}
	// Another origin gets no CORS headers, and the key check as before.
	pre.Header.Set("Origin", "http://evil.example")
	r = send(t, pre)
	errorShape(t, r, 400, "InvalidKeyException", "management key")
	if r.header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("preflight from another origin: %v", r.header)
	}
	// The actual request needs the management key, and its answer is readable by the page.
	r = get(t, s.mgmt+"/models", "Origin", origin)
	errorShape(t, r, 400, "InvalidKeyException", "management key")
	if r.header.Get("Access-Control-Allow-Origin") != origin {
		t.Errorf("refusal without CORS headers: %v", r.header)
	}
	r = get(t, s.mgmt+"/models", "Origin", origin, "Authorization", "Bearer "+k.Management.Key)
	if r.status != 200 || r.header.Get("Access-Control-Allow-Origin") != origin {
		t.Errorf("GET /models with the key: %d %v", r.status, r.header)
	}
	if r := get(t, s.mgmt+"/models", "Origin", "http://evil.example", "Authorization", "Bearer "+k.Management.Key); r.status != 200 || r.header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("GET /models from another origin: %d %v", r.status, r.header)
	}
}

// enable_ui = false: no page; without management_allowed_origins the management API sends no
// CORS headers, and the page is not told the management port.
func TestWebPageOff(t *testing.T) {
	s := startServer(t, "--enable-ui=false")
	errorShape(t, get(t, s.inf+"/ui/", "Accept", "text/html"), 404, "ResourceNotFoundException", "")
	pre := must(t, "OPTIONS", s.mgmt+"/models", "", nil)
	pre.Header.Set("Origin", "http://127.0.0.1:8080")
	pre.Header.Set("Access-Control-Request-Method", "POST")
	if r := send(t, pre); r.header.Get("Access-Control-Allow-Origin") != "" || r.status == 204 {
		t.Errorf("preflight with CORS off: %d %v", r.status, r.header)
	}

	// On by default: a browser gets the page at /, an API client the 405 it always got.
	s = startServer(t)
	if r := get(t, s.inf+"/", "Accept", "text/html"); r.status != 200 {
		t.Errorf("GET / for a browser: %d %.200s", r.status, r.body)
	}
	var info struct{ Management *struct{ Port int } }
	get(t, s.inf+"/ui/api/models").json(t, &info)
	if info.Management != nil {
		t.Errorf("the management port is told without management_allowed_origins: %+v", info.Management)
	}
}
