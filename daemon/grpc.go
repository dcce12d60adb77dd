package daemon

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"fmt"
	"net"
	"runtime"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/torchd/torchd/frontend"
	pb "github.com/torchd/torchd/proto/inference"
	tspb "github.com/torchd/torchd/proto/torchserve"
)

// The gRPC front-ends, each a google.golang.org/grpc server on its own port, since fasthttp
// does not speak HTTP/2: the Open Inference Protocol as Triton serves it
// (frontend/kserve/grpc.go), and TorchServe's inference and management APIs
// (frontend/torchserve/grpc.go). They are codecs over the same calls as REST: one
// core.Registry.Serve per inference request, and the registry.

// grpcAPI is one gRPC server to start: its name in the logs, its address and its services.
type grpcAPI struct {
	name, addr string
	// key is the token kind its calls need ("inference" or "management").
	key      string
	register func(*grpc.Server)
}

func (d *Daemon) grpcAPIs() []grpcAPI {
	return []grpcAPI{
		{name: "grpc", addr: d.cfg.GRPCAddress, key: "inference", register: func(s *grpc.Server) {
			pb.RegisterGRPCInferenceServiceServer(s, d.kserve.InferenceService())
			healthpb.RegisterHealthServer(s, &frontend.Health{Ready: d.Life.Ready, Stopping: d.grpcStopping})
		}},
		{name: "grpc_inference", addr: d.cfg.GRPCInferenceAddress, key: "inference", register: func(s *grpc.Server) {
			tspb.RegisterInferenceAPIsServiceServer(s, d.ts.InferenceService())
			healthpb.RegisterHealthServer(s, &frontend.Health{Ready: d.Life.Ready, Stopping: d.grpcStopping})
		}},
		{name: "grpc_management", addr: d.cfg.GRPCManagementAddress, key: "management", register: func(s *grpc.Server) {
			tspb.RegisterManagementAPIsServiceServer(s, d.ts.ManagementService())
		}},
	}
}

// startGRPC binds and serves the gRPC APIs whose address is set.
func (d *Daemon) startGRPC(tlsCfg *tls.Config) error {
	maxMsg := d.cfg.GRPCMaxMessageSize
	if maxMsg <= 0 {
		maxMsg = d.cfg.MaxRequestSize
	}
	for _, a := range d.grpcAPIs() {
		if a.addr == "" {
			continue
		}
		ln, err := net.Listen("tcp", a.addr)
		if err != nil {
			for _, s := range d.grpcServers {
				s.Stop()
			}
			return fmt.Errorf("%s API: %w", a.name, err)
		}
		opts := []grpc.ServerOption{
			grpc.MaxRecvMsgSize(maxMsg),
			grpc.MaxSendMsgSize(maxMsg),
			grpc.KeepaliveParams(keepalive.ServerParameters{Time: d.cfg.GRPCKeepaliveTime, Timeout: d.cfg.GRPCKeepaliveTimeout}),
			// Clients may ping as often as every 10 s, idle or not (Triton allows pings
			// without calls too); more often is answered with GOAWAY.
			grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
			grpc.ChainStreamInterceptor(d.grpcAccessStream, d.grpcAuthStream(a.key)),
			// Calls run on a pool of goroutines a core, not a new goroutine each whose stack
			// grows anew on every call (5% of a tiny model's gRPC request).
			grpc.NumStreamWorkers(uint32(runtime.GOMAXPROCS(0))),
		}
		unary := []grpc.UnaryServerInterceptor{d.grpcAccessUnary, d.grpcAuthUnary(a.key)}
		if d.tracer != nil && a.key == "inference" {
			unary = append([]grpc.UnaryServerInterceptor{frontend.TraceUnary(d.tracer)}, unary...)
		}
		opts = append(opts, grpc.ChainUnaryInterceptor(unary...))
		if tlsCfg != nil {
			opts = append(opts, grpc.Creds(credentials.NewTLS(tlsCfg)))
		}
		s := grpc.NewServer(opts...)
		a.register(s)
		d.grpcServers = append(d.grpcServers, s)
		d.serveWG.Add(1)
		go func() {
			defer d.serveWG.Done()
			if err := s.Serve(ln); err != nil {
				d.log.Error("server stopped", "api", a.name, "err", err)
			}
		}()
		d.log.Info("listening", "api", a.name, "addr", ln.Addr().String(), "tls", tlsCfg != nil)
		if a.key == "management" && !isLoopback(ln.Addr()) && d.keys == nil {
			d.log.Warn("the gRPC management API is exposed beyond localhost without token authorization: anyone who can reach it can register models, which are code; set enable_token_authorization = true", "addr", ln.Addr().String())
		}
	}
	return nil
}

// stopGRPC stops the gRPC servers gracefully, answering the calls already accepted, and
// cuts them off when ctx ends.
func (d *Daemon) stopGRPC(ctx context.Context) {
	select {
	case <-d.grpcStopping:
	default:
		close(d.grpcStopping)
	}
	done := make(chan struct{})
	go func() {
		for _, s := range d.grpcServers {
			s.GracefulStop()
		}
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		for _, s := range d.grpcServers {
			s.Stop()
		}
		<-done
	}
}

// grpcExempt lists the calls that need no key, as REST's health checks: probes work unchanged.
func grpcExempt(method string) bool {
	switch method {
	case "/inference.GRPCInferenceService/ServerLive", "/inference.GRPCInferenceService/ServerReady",
		"/org.pytorch.serve.grpc.inference.InferenceAPIsService/Ping":
		return true
	}
	return strings.HasPrefix(method, "/grpc.health.v1.Health/")
}

// grpcAllowed checks the metadata's "authorization: Bearer <key>" against kind's key, as REST
// checks the header; a failure is UNAUTHENTICATED.
func (d *Daemon) grpcAllowed(ctx context.Context, method, kind string) error {
	if d.keys == nil || grpcExempt(method) {
		return nil
	}
	if repositoryControlMethods[method] {
		kind = "management"
	}
	md, _ := metadata.FromIncomingContext(ctx)
	for _, h := range md.Get("authorization") {
		got, ok := strings.CutPrefix(h, "Bearer ")
		if ok && subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), []byte(d.keys.key(kind))) == 1 {
			return nil
		}
	}
	return status.Errorf(codes.Unauthenticated, "Token Authorization failed. Token either incorrect, expired, or not provided correctly: send the %s key as metadata authorization: Bearer <key>", kind)
}

func (d *Daemon) grpcAuthUnary(kind string) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if err := d.grpcAllowed(ctx, info.FullMethod, kind); err != nil {
			return nil, err
		}
		return h(ctx, req)
	}
}

func (d *Daemon) grpcAuthStream(kind string) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		if err := d.grpcAllowed(ss.Context(), info.FullMethod, kind); err != nil {
			return err
		}
		return h(srv, ss)
	}
}

// grpcAccessUnary and grpcAccessStream log one line per call, as the HTTP access log does:
// peer, method, status code, latency.
func (d *Daemon) grpcAccessUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if !d.cfg.AccessLog {
		return h(ctx, req)
	}
	start := time.Now()
	resp, err := h(ctx, req)
	d.grpcAccess(ctx, info.FullMethod, err, start)
	return resp, err
}

func (d *Daemon) grpcAccessStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if !d.cfg.AccessLog {
		return h(srv, ss)
	}
	start := time.Now()
	err := h(srv, ss)
	d.grpcAccess(ss.Context(), info.FullMethod, err, start)
	return err
}

func (d *Daemon) grpcAccess(ctx context.Context, method string, err error, start time.Time) {
	remote := ""
	if p, ok := peer.FromContext(ctx); ok {
		remote = p.Addr.String()
	}
	if d.tracer == nil {
		d.log.Info("access", "remote", remote, "method", "gRPC", "path", method, "status", status.Code(err).String(), "latency", time.Since(start))
		return
	}
	if r := frontend.GRPCTrace(ctx); r != nil {
		d.log.Info("access", "remote", remote, "method", "gRPC", "path", method, "status", status.Code(err).String(), "latency", time.Since(start), "trace_id", r.TraceID())
		return
	}
	d.log.Info("access", "remote", remote, "method", "gRPC", "path", method, "status", status.Code(err).String(), "latency", time.Since(start))
}
