package frontendtest

import (
	"net"
	"testing"

	"github.com/valyala/fasthttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Listen serves srv on a free port of 127.0.0.1 until the test ends and returns its
// host:port, for the tests whose point is a connection: a real client, a streamed answer's
// chunks, a peer's own client.
func Listen(t testing.TB, srv *fasthttp.Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Shutdown() })
	return ln.Addr().String()
}

// ListenGRPC serves a gRPC server with the services register adds on a free port of
// 127.0.0.1 until the test ends, and returns its host:port.
func ListenGRPC(t testing.TB, register func(*grpc.Server)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	register(g)
	go g.Serve(ln)
	t.Cleanup(g.Stop)
	return ln.Addr().String()
}

// DialGRPC is a client connection to a gRPC server at addr, without TLS, that sends and
// takes messages of up to 64 MiB; it closes when the test ends.
func DialGRPC(t testing.TB, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}
