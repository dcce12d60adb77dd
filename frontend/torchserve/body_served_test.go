package torchserve_test

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"unsafe"

	"github.com/torchd/torchd/frontend"
	"github.com/torchd/torchd/handlers/handlertest"
	"github.com/torchd/torchd/lifecycle"
	"github.com/valyala/fasthttp"
)

// A request's tensors point into its body, which fasthttp keeps and reuses for the next
// request on the connection once the handler returns. A request answered 200 leaves the body
// there, uncopied, for that reuse; one answered 504 while its batch may still read the body
// takes it from fasthttp first, so that the next request's bytes never land under a running
// batch. Here the worker is held before its forward until the request has timed out and the
// server has reused the request (Reset, then the next body): the held request's bytes are as
// they were. Both the TorchServe and the KServe v2 binary-tensor paths. The worker is held by
// the probe handler (package handlertest), which serves as the tensor handler does.
func TestTimedOutRequestKeepsItsBody(t *testing.T) {
	s := serve(t, 1, nil, options{store: probeStore(t, "digits_tensor", "digits"), startup: lifecycle.Startup{Models: "digits_tensor=digits_tensor"}})
	s.waitHealthy(t)
	v, err := s.reg.Get("digits_tensor", "")
	if err != nil {
		t.Fatal(err)
	}
	router := frontend.NewRouter("inference", slices.Concat(s.ts.InferenceRoutes(), s.ks.Routes()))
	// serveREST serves ctx's request to v as POST /predictions/{name}/{version} (v2 false) or
	// POST /v2/models/{name}/versions/{version}/infer (v2 true), and returns the status.
	serveREST := func(ctx *fasthttp.RequestCtx, v2 bool) int {
		path := "/predictions/" + v.Name + "/" + v.Version
		if v2 {
			path = "/v2/models/" + v.Name + "/versions/" + v.Version + "/infer"
		}
		ctx.Request.Header.SetMethod("POST")
		ctx.Request.SetRequestURI(path)
		router.Serve(ctx)
		return ctx.Response.StatusCode()
	}
	npy, err := os.ReadFile(filepath.Join(zoo, "digits", "sample_tensor.npy"))
	if err != nil {
		t.Fatal(err)
	}
	const header = `{"inputs":[{"name":"input__0","shape":[1,1,28,28],"datatype":"FP32","parameters":{"binary_data_size":3136}}]}`
	raw := npy[len(npy)-3136:] // the npy's float32 data
	v2 := append([]byte(header), raw...)
	for _, c := range []struct {
		name, ct string
		v2       bool
		body     []byte
	}{{"predictions npy", "application/x-npy", false, npy}, {"v2 binary", "application/octet-stream", true, v2}} {
		t.Run(c.name, func(t *testing.T) {
			newCtx := func(timeout string) *fasthttp.RequestCtx {
				ctx := &fasthttp.RequestCtx{}
				ctx.Request.Header.SetMethod("POST")
				ctx.Request.Header.SetContentType(c.ct)
				if c.v2 {
					ctx.Request.Header.Set("Inference-Header-Content-Length", strconv.Itoa(len(header)))
				}
				if timeout != "" {
					ctx.Request.Header.Set(frontend.HeaderRequestTimeout, timeout)
				}
				ctx.Request.SetBody(c.body)
				return ctx
			}

			// Answered: the body stays fasthttp's, in the same buffer.
			ctx := newCtx("")
			body := ctx.Request.Body()
			if st := serveREST(ctx, c.v2); st != 200 {
				t.Fatalf("status %d: %s", st, ctx.Response.Body())
			}
			if !sameArray(ctx.Request.Body(), body) {
				t.Error("an answered request's body was taken from fasthttp")
			}

			// Timed out while its worker is held: the body is taken before the handler returns.
			held, release := make(chan struct{}), make(chan struct{})
			probe.Before(func(int) {
				close(held)
				<-release
			})
			ctx = newCtx("300")
			body = ctx.Request.Body()
			st := serveREST(ctx, c.v2)
			select {
			case <-held:
			default:
				t.Fatalf("status %d before the worker took the request", st)
			}
			if st != 504 {
				t.Fatalf("status %d, want 504: %s", st, ctx.Response.Body())
			}
			if sameArray(ctx.Request.Body(), body) || len(ctx.Request.Body()) != 0 {
				t.Error("a request answered 504 left its body to fasthttp while its batch may read it")
			}
			ctx.Request.Reset()
			ctx.Request.SetBody(bytes.Repeat([]byte{0xff}, len(c.body)))
			if !bytes.Equal(body, c.body) {
				t.Error("the next request's body overwrote the one its held batch reads")
			}
			probe.Before(nil)
			close(release)
		})
	}
}

// probe serves the archives of probeStore as their configs' handler does, and runs a test's
// function on the worker's thread before each forward.
var probe = handlertest.Register("torchserve_probe", "tensor")

// probeStore returns a model store holding name, a directory archive of the zoo model zoo
// with models/configs/name.toml's settings, served by the probe (which wraps the tensor
// handler).
func probeStore(t *testing.T, name, zooName string) string {
	t.Helper()
	config, err := os.ReadFile(filepath.Join("..", "..", "models", "configs", name+".toml"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(config, []byte(`handler = "tensor"`)) {
		t.Fatalf("%s.toml: the probe wraps the tensor handler; the config names another", name)
	}
	model, err := filepath.Abs(filepath.Join(zoo, zooName, "model.pt"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(model, filepath.Join(dir, name, "model.pt")); err != nil {
		t.Fatal(err)
	}
	config = bytes.Replace(config, []byte(`handler = "tensor"`), []byte(`handler = "torchserve_probe"`), 1)
	if err := os.WriteFile(filepath.Join(dir, name, "model-config.toml"), config, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func sameArray(a, b []byte) bool {
	return len(a) > 0 && len(b) > 0 && unsafe.SliceData(a) == unsafe.SliceData(b)
}
