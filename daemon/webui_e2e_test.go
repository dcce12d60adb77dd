package daemon_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
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
// for the listed origin; a preflight needs no key, the actual request does.
func TestWebPageAuthorization(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "keys.json")
	const origin = "http://page.example:8080"
	s := startServer(t, "--enable-token-authorization", "--key-file", keyFile, "--models", "digits=digits.mar",
		"--management-allowed-origins", origin)
	s.waitHealthy(t)
	k := readKeys(t, keyFile)
	bearer := func(key string) []string { return []string{"Authorization", "Bearer " + key} }

	for _, c := range []struct{ path, accept, contentType string }{
		{"/", "text/html,application/xhtml+xml", "text/html; charset=utf-8"},
		{"/ui/", "", "text/html; charset=utf-8"},
		{"/ui", "", "text/html; charset=utf-8"},
		{"/ui/app.js", "", "text/javascript; charset=utf-8"},
		{"/ui/style.css", "", "text/css; charset=utf-8"},
		{"/ui/favicon.svg", "", "image/svg+xml"},
	} {
		r := get(t, s.inf+c.path, "Accept", c.accept)
		if r.status != 200 || r.header.Get("Content-Type") != c.contentType || r.header.Get("Cache-Control") != "no-cache" || r.header.Get("ETag") == "" {
			t.Errorf("GET %s without a key: %d %v", c.path, r.status, r.header)
		}
		if r2 := get(t, s.inf+c.path, "Accept", c.accept, "If-None-Match", r.header.Get("ETag")); r2.status != 304 || len(r2.body) != 0 {
			t.Errorf("GET %s with its ETag: %d, %d bytes", c.path, r2.status, len(r2.body))
		}
	}
	if r := get(t, s.inf+"/", "Accept", "text/html"); !strings.Contains(string(r.body), "<title>torchd</title>") ||
		!strings.Contains(r.header.Get("Content-Security-Policy"), "frame-ancestors 'none'") || r.header.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("GET / for a browser: %d %v", r.status, r.header)
	}
	errorShape(t, get(t, s.inf+"/ui/nothing.js"), 404, "ResourceNotFoundException", "")

	// The rest needs the inference key.
	for _, path := range []string{"/ui/api/models", "/ui/api/stats", "/ui/api/nothing"} {
		for _, key := range []string{"", "wrong", k.Management.Key, k.API.Key} {
			errorShape(t, get(t, s.inf+path, bearer(key)...), 400, "InvalidKeyException", "inference key")
		}
	}
	errorShape(t, get(t, s.inf+"/"), 400, "InvalidKeyException", "inference key") // not a browser
	errorShape(t, send(t, must(t, "OPTIONS", s.inf+"/", "", nil)), 400, "InvalidKeyException", "inference key")
	errorShape(t, get(t, s.inf+"/", bearer(k.Inference.Key)...), 405, "MethodNotAllowedException", "")

	var info struct {
		TokenAuthorization bool
		Management         *struct{ Port int }
		Models             []struct {
			Name, Version, Handler, State string
			Workers, BatchSize            int
		}
	}
	get(t, s.inf+"/ui/api/models", bearer(k.Inference.Key)...).json(t, &info)
	if !info.TokenAuthorization || info.Management == nil || !strings.HasSuffix(s.mgmt, ":"+strconv.Itoa(info.Management.Port)) {
		t.Errorf("models: %+v (management %s)", info, s.mgmt)
	}
	if len(info.Models) != 1 || info.Models[0].Name != "digits" || info.Models[0].Handler != "image_classifier" ||
		info.Models[0].State != "READY" || info.Models[0].Workers != 1 || info.Models[0].BatchSize != 32 {
		t.Errorf("models: %+v", info.Models)
	}

	// The live view: requests show up within two samples.
	png, _ := os.ReadFile(filepath.Join(zooDir, "digits", "sample.png"))
	get(t, s.inf+"/ui/api/stats", bearer(k.Inference.Key)...) // starts the sampler
	deadline := time.Now().Add(15 * time.Second)
	for {
		for range 20 {
			req := must(t, "POST", s.inf+"/predictions/digits", "image/png", png)
			req.Header.Set("Authorization", "Bearer "+k.Inference.Key)
			send(t, req)
		}
		var st struct {
			Models []struct {
				Name       string
				RPS, P50Ms []*float64
				Batch      []*float64
			}
		}
		get(t, s.inf+"/ui/api/stats", bearer(k.Inference.Key)...).json(t, &st)
		if len(st.Models) == 1 && len(st.Models[0].RPS) > 0 {
			m := st.Models[0]
			last := len(m.RPS) - 1
			if m.RPS[last] != nil && *m.RPS[last] > 0 && m.P50Ms[last] != nil && *m.P50Ms[last] > 0 && m.Batch[last] != nil && *m.Batch[last] >= 1 {
				t.Logf("live view: %.1f requests/s, p50 %.2f ms, batch %.2f", *m.RPS[last], *m.P50Ms[last], *m.Batch[last])
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no requests in the live view: %+v", st)
		}
		time.Sleep(500 * time.Millisecond)
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

// enable_ui = false: no page, no JSON, GET / as before; without management_allowed_origins
// the management API sends no CORS headers.
func TestWebPageOff(t *testing.T) {
	s := startServer(t, "--enable-ui=false")
	for _, path := range []string{"/ui/", "/ui/app.js", "/ui/api/models", "/ui/api/stats"} {
		errorShape(t, get(t, s.inf+path, "Accept", "text/html"), 404, "ResourceNotFoundException", "")
	}
	errorShape(t, get(t, s.inf+"/", "Accept", "text/html"), 405, "MethodNotAllowedException", "")
	pre := must(t, "OPTIONS", s.mgmt+"/models", "", nil)
	pre.Header.Set("Origin", "http://127.0.0.1:8080")
	pre.Header.Set("Access-Control-Request-Method", "POST")
	if r := send(t, pre); r.header.Get("Access-Control-Allow-Origin") != "" || r.status == 204 {
		t.Errorf("preflight with CORS off: %d %v", r.status, r.header)
	}

	// On by default: a browser gets the page at /, an API client the 405 it always got.
	s = startServer(t)
	r := get(t, s.inf+"/", "Accept", "text/html")
	if r.status != 200 || !strings.Contains(string(r.body), `<script src="/ui/app.js"`) {
		t.Errorf("GET / for a browser: %d %.200s", r.status, r.body)
	}
	errorShape(t, get(t, s.inf+"/"), 405, "MethodNotAllowedException", "")
	var info struct{ Management *struct{ Port int } }
	get(t, s.inf+"/ui/api/models").json(t, &info)
	if info.Management != nil {
		t.Errorf("the management port is told without management_allowed_origins: %+v", info.Management)
	}
	if r := get(t, s.inf+"/ui/api/stats"); r.status != 200 || r.header.Get("Cache-Control") != "no-store" {
		t.Errorf("stats: %d %v", r.status, r.header)
	}
}
