package kserve

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/backends/libtorch"
	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/frontend"
	"github.com/torchd/torchd/lifecycle"
	pb "github.com/torchd/torchd/proto/inference"
)

// The repository index over REST (POST /v2/repository/index) and gRPC (RepositoryIndex)
// answers the same models and states, with and without a Triton model repository: both are
// lifecycle's one index. The models are the zoo's digits CNN (models/out) over LibTorch.

type indexEntry struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	State   string `json:"state"`
	Reason  string `json:"reason"`
}

func TestRepositoryIndexRESTAndGRPCAgree(t *testing.T) {
	model, err := filepath.Abs(filepath.Join("..", "..", "models", "out", "digits", "model.pt"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(model); err != nil {
		t.Fatalf("no zoo model (run make models): %v", err)
	}
	write := func(path, text string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A copy, not a link: a repository refuses links that leave it.
	b, err := os.ReadFile(model)
	if err != nil {
		t.Fatal(err)
	}
	copyModel := func(path string) { t.Helper(); write(path, string(b)) }
	// A model store of one directory archive, and a Triton repository of digits, a config
	// that does not parse, and a version without its model.
	store := t.TempDir()
	copyModel(filepath.Join(store, "digits", "model.pt"))
	write(filepath.Join(store, "digits", "model-config.toml"), "handler = \"tensor\"\n[[inputs]]\nname = \"input__0\"\ndtype = \"float32\"\nshape = [-1, 1, 28, 28]\n")
	repo := t.TempDir()
	const config = `platform: "pytorch_libtorch"
max_batch_size: 8
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 1, 28, 28 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 10 ] } ]
`
	write(filepath.Join(repo, "triton_digits", "config.pbtxt"), config)
	copyModel(filepath.Join(repo, "triton_digits", "1", "model.pt"))
	write(filepath.Join(repo, "broken", "config.pbtxt"), "max_batch_size: {")
	write(filepath.Join(repo, "nofile", "config.pbtxt"), config)
	write(filepath.Join(repo, "nofile", "1", "README"), "no model here")

	for _, c := range []struct {
		name, repository string
		// want are entries each index must hold, as "name version STATE".
		want []string
	}{
		{"model store", "", []string{"a 1.0 READY", "idle 1.0 UNAVAILABLE", "missing  UNAVAILABLE", "digits  "}},
		{"model repository", repo, []string{"a 1.0 READY", "idle 1.0 UNAVAILABLE", "missing  UNAVAILABLE",
			"triton_digits 1 READY", "broken  UNAVAILABLE", "nofile 1 UNAVAILABLE"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			api := indexAPI(t, store, c.repository)
			rest := func(ready bool) []indexEntry {
				ctx := &fasthttp.RequestCtx{}
				ctx.Request.Header.SetMethod("POST")
				ctx.Request.SetRequestURI("/v2/repository/index")
				if ready {
					ctx.Request.SetBodyString(`{"ready": true}`)
				}
				frontend.Describe("inference", api.Routes()).Serve(ctx)
				var out []indexEntry
				if code := ctx.Response.StatusCode(); code != 200 {
					t.Fatalf("REST index: %d %s", code, ctx.Response.Body())
				}
				if err := json.Unmarshal(ctx.Response.Body(), &out); err != nil {
					t.Fatalf("REST index %s: %v", ctx.Response.Body(), err)
				}
				return out
			}
			client := grpcClient(t, api)
			grpcIndex := func(ready bool) []indexEntry {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				r, err := client.RepositoryIndex(ctx, &pb.RepositoryIndexRequest{Ready: ready})
				if err != nil {
					t.Fatalf("gRPC index: %v", err)
				}
				var out []indexEntry
				for _, m := range r.GetModels() {
					out = append(out, indexEntry{m.GetName(), m.GetVersion(), m.GetState(), m.GetReason()})
				}
				return out
			}
			for _, ready := range []bool{false, true} {
				byREST, byGRPC := rest(ready), grpcIndex(ready)
				if !slices.Equal(byREST, byGRPC) {
					t.Fatalf("ready %v: REST answers %+v, gRPC %+v", ready, byREST, byGRPC)
				}
				have := map[string]bool{}
				for _, e := range byREST {
					have[e.Name+" "+e.Version+" "+e.State] = true
					if ready && e.State != lifecycle.StateReady {
						t.Errorf("ready index lists %+v", e)
					}
					if e.State == lifecycle.StateUnavailable && e.Reason == "" {
						t.Errorf("UNAVAILABLE without a reason: %+v", e)
					}
				}
				for _, w := range c.want {
					isReady := len(w) > 5 && w[len(w)-5:] == "READY"
					if (!ready || isReady) && !have[w] {
						t.Errorf("ready %v: no %q in %+v", ready, w, byREST)
					}
				}
			}
		})
	}
}

// indexAPI is the Open Inference Protocol over a lifecycle service in explicit mode, with the
// model store store and the Triton repository repo ("": none), whose start-up has loaded
// every repository model; through the management calls, a serves and idle has no worker,
// and missing is a start-up model that failed.
func indexAPI(t *testing.T, store, repo string) *API {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	reg := core.NewRegistry(core.Options{Log: log, Runtimes: []core.Runtime{libtorch.Backend{}}, Defaults: archive.Settings{
		BatchSize: archive.Fixed(1), MaxBatchDelay: archive.Fixed(time.Duration(0)), MinWorkers: archive.Fixed(1),
		JobQueueSize: archive.Of(10), ResponseTimeout: archive.Of(time.Minute), StartupTimeout: archive.Of(time.Minute),
		Device: archive.Of("cpu"), Precision: archive.Of("fp32"),
	}})
	t.Cleanup(reg.Close)
	open := func(req core.RegisterRequest) (*core.ModelVersion, error) {
		am, err := archive.Open(filepath.Join(store, req.URL))
		if err != nil {
			return nil, core.Errorf(core.ErrBadModel, "%s: %v", req.URL, err)
		}
		return reg.Add(req.Name, am.Version, req, am)
	}
	life := lifecycle.New(lifecycle.Config{Registry: reg, Open: open, ModelStore: store, ControlMode: lifecycle.ControlExplicit, Log: log})
	t.Cleanup(life.Stop)
	if repo != "" {
		life.OpenRepository(repo)
	}
	life.Start(lifecycle.Startup{Models: "missing=missing.mar", LoadModels: []string{"*"}})
	life.WaitStartup()
	if _, err := life.Register(lifecycle.Registration{URL: "digits", Name: "a", Synchronous: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := life.Register(lifecycle.Registration{URL: "digits", Name: "idle", Synchronous: true,
		Defaults: archive.Settings{MinWorkers: archive.Fixed(0)}}); err != nil {
		t.Fatal(err)
	}
	return &API{Registry: reg, Life: life, Ready: life.Ready, LogLevel: new(slog.LevelVar)}
}

// grpcClient serves api's gRPC service in memory and returns a client of it.
func grpcClient(t *testing.T, api *API) pb.GRPCInferenceServiceClient {
	t.Helper()
	ln := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	pb.RegisterGRPCInferenceServiceServer(srv, api.InferenceService())
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("passthrough:///index", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return ln.DialContext(ctx) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewGRPCInferenceServiceClient(conn)
}
