package handlerproc

import (
	"bufio"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/torchd/torchd/core/coretest"
)

// A line over maxLogLine is cut, with how much was cut; the lines after it still come.
func TestReadLineCutsLongLines(t *testing.T) {
	long := strings.Repeat("x", 3<<20)
	r := bufio.NewReaderSize(strings.NewReader("short\n"+long+"\nafter\n"+strings.Repeat("y", maxLogLine)+"\nlast"), 64<<10)
	want := []struct {
		line string
		cut  int
	}{{"short", 0}, {long[:maxLogLine], len(long) - maxLogLine}, {"after", 0}, {strings.Repeat("y", maxLogLine), 0}, {"last", 0}}
	for i, w := range want {
		line, cut, err := readLine(r)
		if err != nil || line != w.line || cut != w.cut {
			t.Fatalf("line %d: %d bytes, cut %d, %v; want %d bytes, cut %d", i, len(line), cut, err, len(w.line), w.cut)
		}
	}
	if _, _, err := readLine(r); err != io.EOF {
		t.Errorf("after the last line: %v", err)
	}
}

// The bucket passes its rate, counts what it drops, and says so at most once a second and
// when the output ends.
func TestLogLimiter(t *testing.T) {
	l := newLogLimiter(10)
	now := l.last
	passed, notices := 0, int64(0)
	for range 100 { // all at once: the bucket's 10 pass
		ok, n := l.allow(now)
		if ok {
			passed++
		}
		notices += n
	}
	if passed != 10 || l.dropped.Load() != 90 || notices != 0 {
		t.Fatalf("passed %d, dropped %d, noticed %d; want 10, 90, 0", passed, l.dropped.Load(), notices)
	}
	// Half a second later: 5 tokens, and the drops are told with the first line that passes.
	now = now.Add(500 * time.Millisecond)
	l.noticed = now.Add(-2 * time.Second)
	ok, n := l.allow(now)
	if !ok || n != 90 {
		t.Fatalf("after refill: ok %v, notice %d; want true, 90", ok, n)
	}
	for range 10 {
		l.allow(now)
	}
	if n := l.flush(); n != 6 {
		t.Errorf("flush told %d drops; want 6", n)
	}
	if n := l.flush(); n != 0 {
		t.Errorf("a second flush told %d", n)
	}
}

// syncBuffer is a log that the processes write while the test reads it.
type syncBuffer = coretest.LogBuffer

// waitLog waits for the log to hold s; the bound only ends a test that failed.
func waitLog(t *testing.T, log *syncBuffer, s string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(log.String(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("the log never held %q", s)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A handler line of 2 MiB is logged cut, and the process's log goes on.
func TestHandlerLongLineLogged(t *testing.T) {
	log := &syncBuffer{}
	m, err := startTiny(t, "handler.py", func(c *Config) { c.Log = slog.New(slog.NewTextHandler(log, nil)) })
	if err != nil {
		t.Fatal(err)
	}
	if pr, err := m.Predict([]Request{jsonReq("a", `"long line"`)}); err != nil || pr.Code != 200 {
		t.Fatalf("%+v, %v", pr, err)
	}
	waitLog(t, log, "after the long line")
	for _, l := range strings.Split(log.String(), "\n") {
		if strings.Contains(l, "xxxx") {
			if len(l) > maxLogLine+1024 || !strings.Contains(l, "bytes cut") {
				t.Errorf("the long line was logged as %d bytes: %.200s…", len(l), l)
			}
		}
	}
}

// A flood of output passes at the model's rate; every line is logged or counted as dropped,
// and the log says how many were dropped.
func TestHandlerOutputRateLimited(t *testing.T) {
	log := &syncBuffer{}
	m, err := startTiny(t, "handler.py", func(c *Config) {
		c.Log = slog.New(slog.NewTextHandler(log, nil))
		c.LogLinesPerSecond = 50
	})
	if err != nil {
		t.Fatal(err)
	}
	const n = 20000
	if pr, err := m.Predict([]Request{jsonReq("a", `{"flood": 20000}`)}); err != nil || pr.Code != 200 {
		t.Fatalf("%+v, %v", pr, err)
	}
	m.Close() // the output ends: the last drops are told
	logged := strings.Count(log.String(), "flood line")
	dropped := m.DroppedLogLines()
	if int64(logged)+dropped < n {
		t.Errorf("%d lines logged and %d dropped of %d", logged, dropped, n)
	}
	if dropped > 0 && !strings.Contains(log.String(), "lines dropped") {
		t.Errorf("%d lines dropped without a word in the log", dropped)
	}
}
