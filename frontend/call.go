package frontend

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/torchd/torchd/core"
)

// RESTCall is a fasthttp request's call: its connection, and its X-Request-Timeout header.
func RESTCall(ctx *fasthttp.RequestCtx) core.Call {
	return core.Call{Gone: ClientGone(ctx.Conn()), Timeout: func() (time.Duration, error) {
		h := ctx.Request.Header.Peek(HeaderRequestTimeout)
		if len(h) == 0 {
			return 0, nil
		}
		return parseRequestTimeout(string(h))
	}, Keep: func() { ctx.Request.SwapBody(nil) }}
}

// HeaderRequestTimeout carries a request's own deadline, counted from its arrival: a number
// of milliseconds ("250") or a Go duration ("1.5s"). A request whose deadline passes while it
// is queued is answered 504 and never reaches the model.
const HeaderRequestTimeout = "X-Request-Timeout"

func parseRequestTimeout(v string) (time.Duration, error) {
	v = strings.TrimSpace(v)
	if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 && ms < 1e12 {
		return time.Duration(ms * float64(time.Millisecond)), nil
	}
	if d, err := time.ParseDuration(v); err == nil && d > 0 {
		return d, nil
	}
	return 0, fmt.Errorf("header %s must be a positive number of milliseconds or a duration like 1.5s, got %q", HeaderRequestTimeout, v)
}

// ClientGone returns a check for a disconnected client: a non-blocking peek at the socket
// that reads end-of-file or a reset. fasthttp has read the whole request by then, so any
// byte waiting is a pipelined request, and the client is still there. It is checked between
// a request's images, when the request joins a batch (so that requests whose client left
// never reach the model), and before the answer is counted. What runs in between, one
// image's decode or one batched forward, is not interrupted.
func ClientGone(c net.Conn) func() bool {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn() // a closed TCP connection reads end-of-file under TLS too
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return func() bool {
		gone := false
		var buf [1]byte
		_ = raw.Read(func(fd uintptr) bool {
			n, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
			switch {
			case err == nil:
				gone = n == 0
			case errors.Is(err, syscall.EAGAIN), errors.Is(err, syscall.EINTR):
			default:
				// ECONNRESET: a client that gave up with unread data in flight resets the
				// connection instead of closing it.
				gone = true
			}
			return true
		})
		return gone
	}
}
