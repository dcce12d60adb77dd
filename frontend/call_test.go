package frontend

import (
	"net"
	"testing"
	"time"
)

// ClientGone tells a closed or reset connection from one that is idle or has a pipelined
// request waiting.
func TestClientGone(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	pair := func() (client *net.TCPConn, gone func() bool) {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		s, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(); s.Close() })
		return c.(*net.TCPConn), ClientGone(s)
	}
	// gone must turn true within a generous bound once the close has travelled.
	eventually := func(what string, gone func() bool) {
		deadline := time.Now().Add(10 * time.Second)
		for !gone() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not seen as gone", what)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	c, gone := pair()
	if gone() {
		t.Fatal("an idle connection is seen as gone")
	}
	c.Write([]byte("GET / HTTP/1.1\r\n")) // a pipelined request
	time.Sleep(50 * time.Millisecond)
	if gone() {
		t.Fatal("a connection with a pipelined request is seen as gone")
	}

	c, gone = pair()
	c.Close()
	eventually("closed", gone)

	c, gone = pair()
	c.SetLinger(0) // Close sends a reset
	c.Close()
	eventually("reset", gone)
}
