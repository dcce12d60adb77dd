// Package frontendtest tests a protocol front-end as a codec: a request's bytes go to its
// routes in a fasthttp.RequestCtx, without a server or a socket, and the answer's bytes are
// compared with a golden file of the package's testdata/. `go test -update` rewrites the
// golden files with what the tests get. Production code must not import it.
package frontendtest

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/torchd/torchd/frontend"
	"github.com/valyala/fasthttp"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/ with the answers the tests get")

// Request is one HTTP request to a front-end.
type Request struct {
	Method, URI string
	Header      map[string]string
	Body        []byte
}

// Response is a front-end's answer: its status, content type and body.
type Response struct {
	Status      int
	ContentType string
	Header      *fasthttp.ResponseHeader
	Body        []byte
}

// Do serves req through routes, as the daemon's router does, and returns the answer.
func Do(routes []*frontend.Route, req Request) Response {
	var ctx fasthttp.RequestCtx
	ctx.Request.Header.SetMethod(req.Method)
	ctx.Request.SetRequestURI(req.URI)
	for k, v := range req.Header {
		ctx.Request.Header.Set(k, v)
	}
	ctx.Request.SetBody(req.Body)
	frontend.NewRouter("inference", routes).Serve(&ctx)
	h := &fasthttp.ResponseHeader{}
	ctx.Response.Header.CopyTo(h)
	return Response{
		Status:      ctx.Response.StatusCode(),
		ContentType: string(ctx.Response.Header.ContentType()),
		Header:      h,
		Body:        append([]byte(nil), ctx.Response.Body()...),
	}
}

// contractHeaders are the response headers a protocol defines, which golden files hold.
var contractHeaders = []string{"Retry-After", "Inference-Header-Content-Length", "Content-Encoding", "Allow"}

// Golden compares an answer with testdata/<name>.golden: its status line, content type and
// the protocol's headers (contractHeaders) exactly; a JSON body as JSON, its numbers within a relative 1e-6 (a model computes them);
// any other body byte for byte.
func Golden(t testing.TB, name string, got Response) {
	t.Helper()
	var b bytes.Buffer
	fmt.Fprintf(&b, "%d %s\n", got.Status, got.ContentType)
	for _, h := range contractHeaders {
		if v := got.Header.Peek(h); v != nil {
			fmt.Fprintf(&b, "%s: %s\n", h, v)
		}
	}
	b.WriteByte('\n')
	b.Write(got.Body)
	GoldenBytes(t, name, b.Bytes(), strings.Contains(got.ContentType, "json"))
}

// GoldenBytes compares got with testdata/<name>.golden (see Golden), the part after its
// first blank line as JSON where isJSON.
func GoldenBytes(t testing.TB, name string, got []byte, isJSON bool) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to write it)", err)
	}
	if bytes.Equal(got, want) {
		return
	}
	gotHead, gotBody, _ := bytes.Cut(got, []byte("\n\n"))
	wantHead, wantBody, _ := bytes.Cut(want, []byte("\n\n"))
	if isJSON && bytes.Equal(gotHead, wantHead) {
		if err := JSONEqual(gotBody, wantBody, 1e-6); err == nil {
			return
		} else {
			t.Errorf("%s: %v", path, err)
		}
	}
	t.Errorf("%s: got\n%s\nwant\n%s", path, got, want)
}

// JSONEqual reports how two JSON documents differ, numbers within a relative tol; nil: they
// do not.
func JSONEqual(got, want []byte, tol float64) error {
	var g, w any
	dg := json.NewDecoder(bytes.NewReader(got))
	dg.UseNumber()
	if err := dg.Decode(&g); err != nil {
		return fmt.Errorf("the answer is not JSON: %v", err)
	}
	dw := json.NewDecoder(bytes.NewReader(want))
	dw.UseNumber()
	if err := dw.Decode(&w); err != nil {
		return fmt.Errorf("the golden file is not JSON: %v", err)
	}
	return jsonDiff("$", g, w, tol)
}

func jsonDiff(at string, g, w any, tol float64) error {
	switch w := w.(type) {
	case json.Number:
		gn, ok := g.(json.Number)
		if !ok {
			return fmt.Errorf("%s: %v, want the number %v", at, g, w)
		}
		x, err1 := gn.Float64()
		y, err2 := w.Float64()
		if err1 != nil || err2 != nil || math.Abs(x-y) > tol*math.Max(1, math.Abs(y)) {
			return fmt.Errorf("%s: %v, want %v", at, gn, w)
		}
		return nil
	case map[string]any:
		gm, ok := g.(map[string]any)
		if !ok || len(gm) != len(w) {
			return fmt.Errorf("%s: %v, want %v", at, g, w)
		}
		for k, wv := range w {
			gv, ok := gm[k]
			if !ok {
				return fmt.Errorf("%s: no key %q", at, k)
			}
			if err := jsonDiff(at+"."+k, gv, wv, tol); err != nil {
				return err
			}
		}
		return nil
	case []any:
		ga, ok := g.([]any)
		if !ok || len(ga) != len(w) {
			return fmt.Errorf("%s: %v, want %v", at, g, w)
		}
		for i := range w {
			if err := jsonDiff(fmt.Sprintf("%s[%d]", at, i), ga[i], w[i], tol); err != nil {
				return err
			}
		}
		return nil
	}
	if fmt.Sprint(g) != fmt.Sprint(w) {
		return fmt.Errorf("%s: %v, want %v", at, g, w)
	}
	return nil
}

// ErrorShape fails the test unless an answer (its status and body) is TorchServe's error
// body for status: {"code": status, "type": typ ("": any), "message": containing msgPart}.
func ErrorShape(t testing.TB, gotStatus int, body []byte, status int, typ, msgPart string) {
	t.Helper()
	if gotStatus != status {
		t.Fatalf("status %d, want %d; body %s", gotStatus, status, body)
	}
	var e struct {
		Code    int    `json:"code"`
		Type    string `json:"type"`
		Message string `json:"message"`
	}
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("status %d body %q: %v", gotStatus, body, err)
	}
	if e.Code != status || (typ != "" && e.Type != typ) || !strings.Contains(e.Message, msgPart) {
		t.Fatalf("error body %s, want code %d type %q message containing %q", body, status, typ, msgPart)
	}
}
