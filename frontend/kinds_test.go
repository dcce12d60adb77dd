package frontend_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/frontend"
	"github.com/torchd/torchd/frontend/kserve"
	"github.com/torchd/torchd/frontend/openai"
	"github.com/torchd/torchd/frontend/torchserve"
)

// Every front-end's table answers every kind of the core's: a kind added to core.Kinds and
// left out of a table would be answered as an unknown error (500, INTERNAL).
func TestKindTablesCoverEveryKind(t *testing.T) {
	type table interface{ Missing() []error }
	tables := map[string]table{
		"TorchServe REST (frontend.TorchServeAnswers)": frontend.TorchServeAnswers,
		"gRPC (frontend.GRPCCodes)":                    frontend.GRPCCodes,
		"KServe v1/v2 REST (kserve.OIPStatuses)":       kserve.OIPStatuses,
		"OpenAI (openai.Statuses)":                     openai.Statuses,
	}
	for _, kind := range core.Kinds {
		for name, tb := range tables {
			for _, missing := range tb.Missing() {
				if missing == kind {
					t.Errorf("%s has no answer to %q", name, kind)
				}
			}
		}
	}
	if len(core.Kinds) < 18 {
		t.Fatalf("core.Kinds lists %d kinds; a table checked against a short list checks nothing", len(core.Kinds))
	}
}

// A handler's own code is data of its kind: TorchServe's REST and gRPC answer with it, and
// without one the kind's answer stands.
func TestHandlerCodeAnswers(t *testing.T) {
	for _, c := range []struct {
		err      error
		status   int
		typ      string
		grpcCode codes.Code
	}{
		{&core.Error{Kind: core.ErrBadInput, HandlerCode: 404, Msg: "no such thing"}, 404, "BadRequestException", codes.NotFound},
		{&core.Error{Kind: core.ErrInference, HandlerCode: 503, Msg: "Prediction failed"}, 503, "InternalServerException", codes.Unavailable},
		{&core.Error{Kind: core.ErrBadInput, Msg: "bad"}, 400, "BadRequestException", codes.InvalidArgument},
		{&core.Error{Kind: core.ErrInference, Msg: "broke"}, 500, "InternalServerException", codes.Internal},
		{core.Errorf(core.ErrUnsupported, "no"), 501, "NotImplementedException", codes.Unimplemented},
		{errors.New("no kind"), 500, "InternalServerException", codes.Internal},
	} {
		if ae := frontend.APIErrorOf(c.err); ae.Status != c.status || ae.Type != c.typ || ae.Msg != c.err.Error() {
			t.Errorf("%v: TorchServe answered %d %s %q, want %d %s", c.err, ae.Status, ae.Type, ae.Msg, c.status, c.typ)
		}
		if got := status.Code(frontend.GRPCError(c.err)); got != c.grpcCode {
			t.Errorf("%v: gRPC answered %v, want %v", c.err, got, c.grpcCode)
		}
	}
}

// A request refused for its key is answered in the shape of the API whose route it asked
// for, as its clients read errors; a path no route owns in TorchServe's, as the router's 404.
// The metrics port takes no key (daemon's TestTokenAuthorization).
func TestUnauthorizedInEachAPIsShape(t *testing.T) {
	ts := &torchserve.API{}
	inference := frontend.NewRouter("inference", append(append(ts.InferenceRoutes(), (&openai.API{}).Routes()...), (&kserve.API{}).Routes()...))
	management := frontend.NewRouter("management", ts.ManagementRoutes())
	const msg = "Token Authorization failed: send the key"
	torchServe := func(t *testing.T, status int, body []byte) {
		var e struct {
			Code    int
			Type    string
			Message string
		}
		if status != 400 || json.Unmarshal(body, &e) != nil || e.Code != 400 || e.Type != "InvalidKeyException" || e.Message != msg {
			t.Errorf("%d %s; want TorchServe's 400 InvalidKeyException", status, body)
		}
	}
	oip := func(t *testing.T, status int, body []byte) {
		var e map[string]any
		if status != 400 || json.Unmarshal(body, &e) != nil || len(e) != 1 || e["error"] != msg {
			t.Errorf("%d %s; want KServe's 400 {\"error\": msg}", status, body)
		}
	}
	for _, c := range []struct {
		api, method, path string
		router            *frontend.Router
		check             func(t *testing.T, status int, body []byte)
	}{
		{"TorchServe inference", "POST", "/predictions/m", inference, torchServe},
		{"TorchServe management", "GET", "/models", management, torchServe},
		{"KServe v1", "POST", "/v1/models/m:predict", inference, oip},
		{"KServe v2", "POST", "/v2/models/m/infer", inference, oip},
		{"KServe v2, another method", "DELETE", "/v2/models/m/infer", inference, oip},
		{"Triton's repository extension", "POST", "/v2/repository/index", inference, oip},
		{"OpenAI", "POST", "/v1/embeddings", inference, func(t *testing.T, status int, body []byte) {
			var e struct {
				Error struct {
					Message, Type string
					Code, Param   *string
				}
			}
			if status != 401 || json.Unmarshal(body, &e) != nil || e.Error.Message != msg || e.Error.Code == nil || *e.Error.Code != "invalid_api_key" ||
				e.Error.Type != "invalid_request_error" || e.Error.Param != nil {
				t.Errorf("%d %s; want OpenAI's 401 invalid_api_key", status, body)
			}
		}},
		{"no route", "GET", "/v2/no/such/route", inference, torchServe},
	} {
		t.Run(c.api, func(t *testing.T) {
			var ctx fasthttp.RequestCtx
			ctx.Request.Header.SetMethod(c.method)
			ctx.Request.SetRequestURI(c.path)
			c.router.Unauthorized(&ctx, msg)
			if ct := string(ctx.Response.Header.ContentType()); !strings.HasPrefix(ct, "application/json") {
				t.Errorf("content type %q", ct)
			}
			c.check(t, ctx.Response.StatusCode(), ctx.Response.Body())
		})
	}
}
