package handlerproc

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// A handler's output goes into torchd's log, and a handler is users' code: one line may be
// endless, and a loop may print millions. A line is cut at maxLogLine, and a model's lines
// pass at most at its rate; the lines dropped are counted (DroppedLogLines, in metrics) and
// the log says how many, at most once a second.

// maxLogLine is the longest line kept; the rest of a longer line is dropped, with a marker.
const maxLogLine = 16 << 10

// DefaultLogLinesPerSecond is the rate of a model's output lines that reach the log.
const DefaultLogLinesPerSecond = 1000

// logLimiter is a token bucket of log lines, one per model, shared by its processes.
type logLimiter struct {
	mu      sync.Mutex
	rate    float64 // lines per second; the bucket holds one second's worth
	tokens  float64
	last    time.Time
	pending int64     // dropped since the last notice
	noticed time.Time // when the last notice was logged
	dropped atomic.Int64
}

func newLogLimiter(perSecond int) *logLimiter {
	if perSecond <= 0 {
		perSecond = DefaultLogLinesPerSecond
	}
	return &logLimiter{rate: float64(perSecond), tokens: float64(perSecond), last: time.Now()}
}

// allow takes a line's token. notice is how many lines were dropped since the last notice,
// when it is time to log it (0: not now).
func (l *logLimiter) allow(now time.Time) (ok bool, notice int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.tokens = min(l.rate, l.tokens+now.Sub(l.last).Seconds()*l.rate)
	l.last = now
	if l.tokens < 1 {
		l.pending++
		l.dropped.Add(1)
		return false, 0
	}
	l.tokens--
	return true, l.takeNotice(now, false)
}

// takeNotice returns the lines dropped since the last notice if one is due (or final).
func (l *logLimiter) takeNotice(now time.Time, final bool) int64 {
	if l.pending == 0 || !final && now.Sub(l.noticed) < time.Second {
		return 0
	}
	n := l.pending
	l.pending, l.noticed = 0, now
	return n
}

// flush returns the lines dropped and not yet noticed, as a process's output ends.
func (l *logLimiter) flush() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.takeNotice(time.Now(), true)
}

// DroppedLogLines is how many lines of the model's handler output were dropped over its rate.
func (m *Model) DroppedLogLines() int64 { return m.limit.dropped.Load() }

// readLine reads one line without its newline, cut at maxLogLine; cut is how many bytes
// were dropped from it. A last line without a newline is returned with io.EOF's nil.
func readLine(r *bufio.Reader) (line string, cut int, err error) {
	var b []byte
	for {
		frag, err := r.ReadSlice('\n')
		if keep := maxLogLine - len(b); keep > 0 {
			b = append(b, frag[:min(len(frag), keep)]...)
			cut += len(frag) - min(len(frag), keep)
		} else {
			cut += len(frag)
		}
		switch {
		case err == nil:
			if cut > 0 {
				cut-- // the newline
			} else {
				b = b[:len(b)-1]
			}
			return string(b), cut, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case len(b) > 0 || cut > 0:
			return string(b), cut, nil
		default:
			return "", 0, err
		}
	}
}

// copyLog writes the worker's output into torchd's log with the model's name. TorchServe's
// [METRICS] lines are the worker's metrics, kept at debug level.
func (p *process) copyLog(r io.Reader, tail *lineTail, limit *logLimiter, done chan<- struct{}) {
	defer close(done)
	if limit == nil {
		limit = newLogLimiter(0)
	}
	debug := p.log.Enabled(context.Background(), slog.LevelDebug)
	br := bufio.NewReaderSize(r, 64<<10)
	pid := p.pid
	for {
		line, cut, err := readLine(br)
		if err != nil {
			break
		}
		if cut > 0 {
			line += " [… " + strconv.Itoa(cut) + " bytes cut: a line is kept up to " + strconv.Itoa(maxLogLine>>10) + " KiB]"
		}
		tail.add(line)
		metrics := strings.Contains(line, "[METRICS]")
		if metrics && p.onMetric != nil {
			if m, ok := parseMetric(line); ok {
				p.onMetric(m)
			}
		}
		if metrics && !debug {
			continue
		}
		ok, notice := limit.allow(time.Now())
		if notice > 0 {
			p.log.Warn("handler output over its rate: lines dropped", "model", p.name, "dropped", notice, "lines_per_second", limit.rate)
		}
		if !ok {
			continue
		}
		if metrics {
			p.log.Debug("handler metrics", "model", p.name, "line", line)
			continue
		}
		p.log.Info("handler", "model", p.name, "pid", pid, "line", line)
	}
	if n := limit.flush(); n > 0 {
		p.log.Warn("handler output over its rate: lines dropped", "model", p.name, "dropped", n, "lines_per_second", limit.rate)
	}
}
