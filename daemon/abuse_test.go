package daemon_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// rawResult is what a raw connection got back.
type rawResult struct {
	responses []response
	elapsed   time.Duration // from the first write to the last response or the close
	closed    bool          // the server closed the connection (EOF or reset)
}

// rawExchange dials addr ("http://host:port"), runs write on the connection in its own
// goroutine (it may trickle), and reads responses until the server closes the connection
// or wait passes.
func rawExchange(t *testing.T, addr string, wait time.Duration, write func(c net.Conn)) rawResult {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(addr, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	go write(c)
	c.SetReadDeadline(start.Add(wait))
	br := bufio.NewReader(c)
	var res rawResult
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			var ne net.Error
			res.closed = !(errors.As(err, &ne) && ne.Timeout())
			break
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		res.responses = append(res.responses, response{status: resp.StatusCode, header: resp.Header, body: b})
		res.elapsed = time.Since(start)
		if err != nil {
			break
		}
	}
	if res.closed {
		res.elapsed = time.Since(start)
	}
	return res
}

// trickle writes b one byte every interval until it is written or the connection fails.
func trickle(b []byte, interval time.Duration) func(net.Conn) {
	return func(c net.Conn) {
		for i := range b {
			if _, err := c.Write(b[i : i+1]); err != nil {
				return
			}
			time.Sleep(interval)
		}
	}
}

func writeAll(b []byte) func(net.Conn) {
	return func(c net.Conn) {
		c.SetWriteDeadline(time.Now().Add(30 * time.Second))
		c.Write(b)
	}
}

// goodRequest is a JSON request whose answer is known: the one it got alone.
type goodRequest struct {
	name, path string
	body       []byte
	want       string
}

func (g *goodRequest) send(c *http.Client, base string) (response, error) {
	resp, err := c.Post(base+g.path, "application/json", bytes.NewReader(g.body))
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, header: resp.Header, body: b}, err
}

// check sends g and says what is wrong with the answer, or "".
func (g *goodRequest) check(c *http.Client, base string) string {
	r, err := g.send(c, base)
	switch {
	case err != nil:
		return fmt.Sprintf("%s: %v", g.name, err)
	case r.status != 200:
		return fmt.Sprintf("%s: %d %.200s", g.name, r.status, r.body)
	case string(r.body) != g.want:
		return fmt.Sprintf("%s: answer %q, alone it was %q", g.name, r.body, g.want)
	}
	return ""
}

// wantTS checks a TorchServe route's error: status, the JSON shape, and part of the message.
func wantTS(t *testing.T, what string, r response, status int, part string) {
	t.Helper()
	var e struct {
		Code    int    `json:"code"`
		Type    string `json:"type"`
		Message string `json:"message"`
	}
	if r.status != status || json.Unmarshal(r.body, &e) != nil || e.Code != status || e.Type == "" || !strings.Contains(e.Message, part) {
		t.Errorf("%s: %d %.300s, want %d with a message containing %q", what, r.status, r.body, status, part)
	}
}

// Protocol abuse on a server with 1 s read, write and idle timeouts: slow clients are cut
// off at the timeout with a 408, bodies over max_request_size are refused from their
// Content-Length alone, lying lengths desynchronize nothing, and clients that behave keep
// getting answers throughout.
func TestProtocolAbuse(t *testing.T) {
	s := startServer(t, "--models", "slow=slow.mar", "--read-timeout", "1s", "--write-timeout", "1s", "--idle-timeout", "1s",
		"--max-request-size", "100000")
	s.waitHealthy(t)
	host := strings.TrimPrefix(s.inf, "http://")
	// No keep-alive: a pooled connection the server closes at its 1 s idle timeout would
	// fail a POST for a reason that is not the test's.
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	good := &goodRequest{name: "slow [[1, 0]]", path: "/predictions/slow", body: []byte(`[[1, 0]]`)}
	r, err := good.send(client, s.inf)
	if err != nil || r.status != 200 {
		t.Fatalf("good request: %v %d %s", err, r.status, r.body)
	}
	good.want = string(r.body)
	// Good requests from two clients for the whole test.
	var ok atomic.Int64
	var failures sync.Map
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if msg := good.check(client, s.inf); msg != "" {
					failures.Store(msg, true)
				} else {
					ok.Add(1)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	head := "POST /predictions/slow HTTP/1.1\r\nHost: " + host + "\r\nContent-Type: application/json\r\n"

	// The slow ones run in parallel: each takes about the 1 s timeout.
	t.Run("Slow", func(t *testing.T) {
		t.Run("SlowlorisHeaders", func(t *testing.T) {
			t.Parallel()
			// 50 connections, each sending a header byte every 100 ms: never finished.
			var wg sync.WaitGroup
			results := make([]rawResult, 50)
			for i := range results {
				wg.Add(1)
				go func() {
					defer wg.Done()
					results[i] = rawExchange(t, s.inf, 10*time.Second, trickle([]byte(head+strings.Repeat("X-Slow: a\r\n", 100)), 100*time.Millisecond))
				}()
			}
			// Meanwhile a good request is answered at once.
			time.Sleep(300 * time.Millisecond)
			start := time.Now()
			if msg := good.check(client, s.inf); msg != "" {
				t.Errorf("good request during the slowloris: %s", msg)
			}
			t.Logf("a good request during 50 slowloris connections: answered in %v", time.Since(start).Round(time.Millisecond))
			wg.Wait()
			var longest time.Duration
			for i, r := range results {
				if len(r.responses) != 1 || !r.closed {
					t.Fatalf("slowloris %d: %d responses, closed %v", i, len(r.responses), r.closed)
				}
				wantTS(t, "slowloris headers", r.responses[0], 408, "timed out reading the request")
				longest = max(longest, r.elapsed)
			}
			t.Logf("50 slowloris connections (headers): all 408 and closed, the last after %v", longest.Round(time.Millisecond))
		})
		t.Run("SlowlorisBody", func(t *testing.T) {
			t.Parallel()
			r := rawExchange(t, s.inf, 10*time.Second, trickle([]byte(head+"Content-Length: 100\r\n\r\n"+strings.Repeat(" ", 99)+"[[1, 0]]"), 100*time.Millisecond))
			if len(r.responses) != 1 || !r.closed {
				t.Fatalf("%d responses, closed %v", len(r.responses), r.closed)
			}
			wantTS(t, "slowloris body", r.responses[0], 408, "timed out reading the request")
			t.Logf("slowloris body (a byte every 100 ms): 408 and closed after %v", r.elapsed.Round(time.Millisecond))
		})
		t.Run("ContentLengthLongerThanBody", func(t *testing.T) {
			t.Parallel()
			r := rawExchange(t, s.inf, 10*time.Second, writeAll([]byte(head+"Content-Length: 1000\r\n\r\n[[1, 0]]")))
			if len(r.responses) != 1 || !r.closed {
				t.Fatalf("%d responses, closed %v", len(r.responses), r.closed)
			}
			wantTS(t, "Content-Length 1000, 8 bytes sent", r.responses[0], 408, "timed out reading the request")
			t.Logf("Content-Length 1000 with 8 bytes sent: 408 and closed after %v", r.elapsed.Round(time.Millisecond))
		})
		t.Run("IdleConnection", func(t *testing.T) {
			t.Parallel()
			r := rawExchange(t, s.inf, 10*time.Second, func(net.Conn) {})
			if !r.closed {
				t.Fatal("a connection that sends nothing was not closed")
			}
			t.Logf("a connection that sends nothing: %d responses, closed after %v", len(r.responses), r.elapsed.Round(time.Millisecond))
			// After one request on a keep-alive connection, idle_timeout closes it quietly.
			r = rawExchange(t, s.inf, 10*time.Second, writeAll([]byte(head+"Content-Length: 8\r\n\r\n[[1, 0]]")))
			if len(r.responses) != 1 || r.responses[0].status != 200 || !r.closed {
				t.Fatalf("keep-alive then idle: %d responses, closed %v", len(r.responses), r.closed)
			}
			t.Logf("a keep-alive connection left idle after one request: closed after %v", r.elapsed.Round(time.Millisecond))
		})
		t.Run("SlowReader", func(t *testing.T) {
			t.Parallel()
			// 2,000 pipelined requests for the API description (about 18 KB each), and
			// nothing read for 3 s: the server blocks writing, and the 1 s write timeout
			// ends the connection instead of holding it for ever.
			c, err := net.Dial("tcp", host)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if tc, ok := c.(*net.TCPConn); ok {
				tc.SetReadBuffer(4096)
			}
			go writeAll(bytes.Repeat([]byte("GET /api-description HTTP/1.1\r\nHost: "+host+"\r\n\r\n"), 2000))(c)
			time.Sleep(3 * time.Second)
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			n, err := io.Copy(io.Discard, c)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("after %d bytes the connection was still open: no write timeout", n)
			}
			if err != nil && !errors.Is(err, syscall.ECONNRESET) {
				t.Fatalf("reading: %v", err)
			}
			desc := do(t, "GET", s.inf+"/api-description", "", nil)
			if total := int64(2000 * len(desc.body)); n >= total {
				t.Fatalf("all %d bytes were delivered: the slow reader was not cut off", n)
			}
			t.Logf("slow reader: cut off after %d bytes (%.1f of 2000 responses), err %v", n, float64(n)/float64(len(desc.body)), err)
		})
	})

	t.Run("BodyOverMaxRequestSize", func(t *testing.T) {
		for _, c := range []struct {
			name, path, extra string
		}{
			{"Content-Length 1 TiB", "/predictions/slow", ""},
			{"Content-Length 1 TiB to v2", "/v2/models/slow/infer", ""},
			{"Content-Length 1 TiB with Expect: 100-continue", "/predictions/slow", "Expect: 100-continue\r\n"},
		} {
			// Headers only: the body is never sent, and the 413 must come anyway.
			r := rawExchange(t, s.inf, 5*time.Second, writeAll([]byte(strings.Replace(head, "/predictions/slow", c.path, 1)+c.extra+"Content-Length: 1099511627776\r\n\r\n")))
			last := len(r.responses) - 1
			if last < 0 || !r.closed {
				t.Fatalf("%s: %d responses, closed %v", c.name, len(r.responses), r.closed)
			}
			wantTS(t, c.name, r.responses[last], 413, "request body exceeds max_request_size (100000 bytes)")
			t.Logf("%s, no body sent: %d after %v, then closed", c.name, r.responses[last].status, r.elapsed.Round(100*time.Microsecond))
		}
		// Chunked: the size is only known while reading; the limit still holds.
		r := rawExchange(t, s.inf, 5*time.Second, writeAll([]byte(head+"Transfer-Encoding: chunked\r\n\r\nffffffffff\r\n[[1, 0]]")))
		if len(r.responses) != 1 {
			t.Fatalf("chunked: %d responses", len(r.responses))
		}
		wantTS(t, "chunk of 1 TiB", r.responses[0], 413, "max_request_size")
	})

	t.Run("ContentLengthShorterThanBody", func(t *testing.T) {
		// The first 8 bytes are the request; the rest is read as the next request, which
		// is no HTTP: 400, and the connection closes.
		r := rawExchange(t, s.inf, 5*time.Second, writeAll([]byte(head+"Content-Length: 8\r\n\r\n[[1, 0]]GARBAGE AFTER THE BODY\r\n\r\n")))
		if len(r.responses) != 2 || !r.closed {
			t.Fatalf("%d responses, closed %v", len(r.responses), r.closed)
		}
		if r.responses[0].status != 200 || string(r.responses[0].body) != good.want {
			t.Errorf("the request within Content-Length: %d %s", r.responses[0].status, r.responses[0].body)
		}
		wantTS(t, "the bytes after Content-Length", r.responses[1], 400, "malformed request")
	})

	t.Run("MalformedFraming", func(t *testing.T) {
		for _, c := range []struct {
			name, req string
			status    int
			part      string
		}{
			{"Content-Length past int64", head + "Content-Length: 99999999999999999999999\r\n\r\n", 400, "cannot parse Content-Length"},
			{"negative Content-Length", head + "Content-Length: -5\r\n\r\nabc", 400, "cannot parse Content-Length"},
			{"two Content-Lengths", head + "Content-Length: 8\r\nContent-Length: 9\r\n\r\n[[1, 0]]", 400, "duplicate Content-Length"},
			{"bad chunk size", head + "Transfer-Encoding: chunked\r\n\r\nzz\r\n[[1, 0]]\r\n0\r\n\r\n", 400, "malformed request"},
			{"unknown Transfer-Encoding", head + "Transfer-Encoding: gzip, chunked\r\n\r\n", 400, "unsupported Transfer-Encoding"},
			{"100 KB header", head + "X-Big: " + strings.Repeat("a", 100_000) + "\r\n\r\n", 431, "exceed 4096 bytes"},
			{"NUL in the path", "POST /predictions/sl\x00ow HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", 400, "invalid requestURI"},
			{"no Host", "POST /predictions/slow HTTP/1.1\r\nContent-Length: 8\r\n\r\n[[1, 0]]", 400, "missing required Host header"},
			{"no HTTP version", "GET /ping\r\n\r\n", 400, "malformed request"},
		} {
			r := rawExchange(t, s.inf, 5*time.Second, writeAll([]byte(c.req)))
			if len(r.responses) != 1 || !r.closed {
				t.Errorf("%s: %d responses, closed %v", c.name, len(r.responses), r.closed)
				continue
			}
			wantTS(t, c.name, r.responses[0], c.status, c.part)
			if bytes.Contains(r.responses[0].body, []byte("POST /predictions")) {
				t.Errorf("%s: the error echoes the request: %s", c.name, r.responses[0].body)
			}
		}
		// Content-Length and Transfer-Encoding together: the body is read chunked, as
		// RFC 9112 says, and the next request on the connection is read where it starts.
		both := head + "Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n8\r\n[[1, 0]]\r\n0\r\n\r\n" + head + "Content-Length: 8\r\nConnection: close\r\n\r\n[[1, 0]]"
		r := rawExchange(t, s.inf, 5*time.Second, writeAll([]byte(both)))
		if len(r.responses) != 2 || r.responses[0].status != 200 || r.responses[1].status != 200 {
			t.Errorf("Content-Length with Transfer-Encoding: %d responses %+v", len(r.responses), r.responses)
		}
	})

	close(stop)
	wg.Wait()
	failures.Range(func(k, _ any) bool {
		t.Errorf("good request failed: %s", k)
		return true
	})
	t.Logf("good requests answered right during the protocol abuse: %d", ok.Load())
	if ok.Load() == 0 {
		t.Error("no good request was answered")
	}
	select {
	case <-s.Exited:
		t.Fatalf("torchd exited: %v\n%s", s.ExitErr, s.Log())
	default:
	}
}
