package soak_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/torchd/torchd/internal/zootest"
)

// The soak test (`make soak`, issue 7) runs the real binary under mixed load across three
// models, one per handler, and hostile registrations (hostile_test.go), for TORCHD_SOAK
// (a duration: 10m, 1h), samples the server every
// soakEvery and fails if memory, goroutines, open files or queues grow without bound, if a
// good request is not answered 200 with the right answer, or if the server dies.
//
// Environment:
//
//	TORCHD_SOAK              how long to drive load; unset: the test is skipped
//	TORCHD_SOAK_OUT          directory for soak.csv (default build/soak)
//	TORCHD_SOAK_PLOT         PNG to draw with gnuplot (docs/soak.png), unset: no plot
//	TORCHD_SOAK_INJECT_LEAK  1: make the server grow on purpose, to see the check fail
//
// Relative paths are taken from the repository root, where make runs.
const (
	soakEvery = 10 * time.Second
	// Clients per model, and one request in soakBadEvery is a bad one (4xx expected).
	soakClients  = 3
	soakBadEvery = 20
	// Every model's queue; the clients can never fill it, so a full queue is a stuck one.
	soakQueueSize = 64
)

// Bounds on growth from the middle third of the samples to the last third (the first third
// is warm-up), each compared median to median so that one spike decides nothing. RSS fails
// only when it grows by both bounds: 10% alone is a few MiB of allocator noise, and 30 MiB
// alone is noise for a big model.
const (
	soakRSSGrowthFrac   = 0.10
	soakRSSGrowthMiB    = 30
	soakGoroutineGrowth = 10
	soakFDGrowth        = 5
)

// soakTarget is one model under load: its route, good requests with their expected top-1
// answers, bad requests, and how to read the top-1 answer from a response body.
type soakTarget struct {
	model, url, contentType string
	good                    [][]byte
	labels                  []string
	bad                     []soakRequest
	top1                    func(body []byte) string
}

type soakRequest struct {
	contentType string
	body        []byte
	encoding    string // Content-Encoding, if any
}

// soakSample is the server seen at one moment, and the load of the interval before it.
type soakSample struct {
	at                time.Duration
	rss, vmRSS        float64 // bytes: process_resident_memory_bytes and /proc VmRSS
	goroutines, fds   float64
	threads           float64   // OS threads: Go's, LibTorch's and OpenMP's
	queue             []float64 // per target
	ok, client, other float64   // server-side answers in the interval: 2xx, 4xx, 5xx and others
	rps               float64   // good requests answered per second (client side)
	p50, p99          time.Duration
}

func TestSoak(t *testing.T) {
	env := os.Getenv("TORCHD_SOAK")
	if env == "" {
		t.Skip("TORCHD_SOAK is not set (make soak SOAK=10m)")
	}
	duration, err := time.ParseDuration(env)
	if err != nil || duration < 3*soakEvery {
		t.Fatalf("TORCHD_SOAK=%q: want a duration of at least %v", env, 3*soakEvery)
	}
	outDir := soakPath(os.Getenv("TORCHD_SOAK_OUT"), filepath.Join("build", "soak"))
	plot := soakPath(os.Getenv("TORCHD_SOAK_PLOT"), "")
	if plot != "" {
		if _, err := exec.LookPath("gnuplot"); err != nil {
			t.Fatal("TORCHD_SOAK_PLOT is set but gnuplot is missing (apt-get install gnuplot-nox)")
		}
	}

	// The access log is off: at this rate it would fill the harness's log buffer.
	s := startServer(t, "--job-queue-size", strconv.Itoa(soakQueueSize), "--threads", "1", "--access-log=false")
	targets := soakTargets(t)
	for _, tg := range targets {
		s.register(t, "url="+tg.model+".mar&batch_size=8&max_batch_delay=5&initial_workers=1&synchronous=true")
	}
	pid := s.Cmd.Process.Pid
	t.Logf("soak: %v, %d models × %d clients, one request in %d bad, samples every %v, pid %d",
		duration, len(targets), soakClients, soakBadEvery, soakEvery, pid)

	load := &soakLoad{targets: targets, inf: s.inf,
		answered: make([]int64, len(targets)), correct: make([]int64, len(targets)), refused: make([]int64, len(targets))}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	// Clients stop before the server does (its cleanup), on every way out of the test.
	stopLoad := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer stopLoad()
	for i, tg := range targets {
		for c := range soakClients {
			wg.Go(func() { load.client(i, tg, uint64(i*soakClients+c), stop) })
		}
	}
	// Issue 50's attacks throughout: packages that crashed the server, a shape that did,
	// and an unload over gRPC.
	hostile := soakHostileModels(t)
	wg.Go(func() { soakHostile(t, s, hostile, targets[0].model, stop) })
	if os.Getenv("TORCHD_SOAK_INJECT_LEAK") == "1" {
		t.Log("TORCHD_SOAK_INJECT_LEAK=1: registering a ResNet-18 copy and holding 8 idle connections every interval")
		wg.Go(func() { soakInjectLeak(t, s, stop) })
	}

	metricsClient := &http.Client{Timeout: 30 * time.Second}
	var samples []soakSample
	var prev [3]float64 // cumulative server answers: 2xx, 4xx, other
	start := time.Now()
	tick := time.NewTicker(soakEvery)
	for len(samples) < int(duration/soakEvery) {
		select {
		case <-tick.C:
		case <-s.Exited:
			t.Fatalf("torchd exited during the soak: %v\n%s", s.ExitErr, s.Log())
		}
		sm, totals, err := scrapeSoak(metricsClient, s.metrics, pid, targets)
		if err != nil {
			t.Fatalf("sample at %v: %v", time.Since(start).Round(time.Second), err)
		}
		sm.at = time.Since(start).Round(time.Second)
		sm.ok, sm.client, sm.other = totals[0]-prev[0], totals[1]-prev[1], totals[2]-prev[2]
		prev = totals
		lat := load.takeLatencies()
		sm.rps = float64(len(lat)) / soakEvery.Seconds()
		sm.p50, sm.p99 = soakQuantile(lat, 0.50), soakQuantile(lat, 0.99)
		samples = append(samples, sm)
		t.Logf("%4.0fs  rss %6.1f MiB (VmRSS %6.1f)  goroutines %3.0f  fds %3.0f  threads %3.0f  queues %v  2xx %5.0f 4xx %3.0f other %.0f  %6.1f req/s  p50 %v p99 %v",
			sm.at.Seconds(), sm.rss/(1<<20), sm.vmRSS/(1<<20), sm.goroutines, sm.fds, sm.threads, sm.queue,
			sm.ok, sm.client, sm.other, sm.rps, sm.p50.Round(100*time.Microsecond), sm.p99.Round(100*time.Microsecond))
	}
	tick.Stop()
	stopLoad()
	select {
	case <-s.Exited:
		t.Fatalf("torchd exited during the soak: %v\n%s", s.ExitErr, s.Log())
	default:
	}

	csvPath := filepath.Join(outDir, "soak.csv")
	if err := writeSoakCSV(csvPath, targets, samples); err != nil {
		t.Fatal(err)
	}
	t.Logf("samples: %s", soakAbs(csvPath))
	if plot != "" {
		title := fmt.Sprintf("torchd soak, %v: %s, %d clients each", duration, soakModelNames(targets), soakClients)
		if err := plotSoak(csvPath, plot, title); err != nil {
			t.Errorf("plot: %v", err)
		} else {
			t.Logf("plot: %s", soakAbs(plot))
		}
	}

	load.report(t)
	summarizeSoak(t, samples)
	for _, p := range soakVerdict(samples, targets) {
		t.Error(p)
	}
}

// soakPath resolves an environment path: relative paths are from the repository root,
// two up from this package's directory, where go test runs.
func soakPath(p, def string) string {
	if p == "" {
		p = def
	}
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join("..", "..", p)
}

func soakAbs(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

func soakModelNames(targets []*soakTarget) string {
	var names []string
	for _, tg := range targets {
		names = append(names, tg.model)
	}
	return strings.Join(names, ", ")
}

// soakTargets are three models, one per handler: the digits CNN behind image_classifier
// (PNG bodies), the sentiment transformer behind text_classifier (text/plain), and the
// digits CNN again behind the tensor handler, through KServe v2 JSON.
func soakTargets(t *testing.T) []*soakTarget {
	pngs, digitLabels := zootest.DigitsHeldOut(t, zooDir)
	texts, textLabels := zootest.TextHeldOut(t, zooDir)

	x := zootest.ReadNpy(t, zooDir, "digits", "heldout.npy")
	y := zootest.ReadNpy(t, zooDir, "digits", "heldout_labels.npy")
	pixels := zootest.F32s(x.Data)
	const size = 28 * 28
	var v2Bodies [][]byte
	var v2Labels []string
	for i := range int(x.Shape[0]) {
		v2Bodies = append(v2Bodies, soakV2Body([]int{1, 1, 28, 28}, pixels[i*size:(i+1)*size]))
		v2Labels = append(v2Labels, strconv.FormatInt(int64(binary.LittleEndian.Uint64(y.Data[8*i:])), 10))
	}

	var textBodies [][]byte
	for _, s := range texts {
		textBodies = append(textBodies, []byte(s))
	}
	return []*soakTarget{
		{
			model: "digits", url: "/predictions/digits", contentType: "image/png",
			good: pngs, labels: digitLabels, top1: top1,
			bad: []soakRequest{
				{"image/png", []byte("not an image"), ""},
				{"image/png", pngs[0][:len(pngs[0])/2], ""},
				{"image/png", pngs[0], "gzip"}, // not gzip: 400, never the PNG's answer
				{"image/png", pngs[0], "br"},   // an encoding torchd does not decode: 400
			},
		},
		{
			model: "textcls", url: "/predictions/textcls", contentType: "text/plain; charset=utf-8",
			good: textBodies, labels: textLabels, top1: top1,
			bad: []soakRequest{
				{"text/plain", []byte("caf\xe9 was great"), ""},
				{"text/plain", []byte(" \n "), ""},
			},
		},
		{
			model: "digits_tensor", url: "/v2/models/digits_tensor/infer", contentType: "application/json",
			good: v2Bodies, labels: v2Labels, top1: soakV2Top1,
			bad: []soakRequest{
				{"application/json", soakV2Body([]int{1, 1, 27, 28}, pixels[:27*28]), ""},
				{"application/json", soakV2Body([]int{1, 2}, []float32{1, 2}), ""},
			},
		},
	}
}

func soakV2Body(shape []int, data []float32) []byte {
	b, _ := json.Marshal(map[string]any{"inputs": []map[string]any{
		{"name": "input__0", "datatype": "FP32", "shape": shape, "data": data},
	}})
	return b
}

// soakV2Top1 is the index of the largest value of a v2 response's first output.
func soakV2Top1(body []byte) string {
	var r struct {
		Outputs []struct {
			Data []float64 `json:"data"`
		} `json:"outputs"`
	}
	if json.Unmarshal(body, &r) != nil || len(r.Outputs) == 0 || len(r.Outputs[0].Data) == 0 {
		return ""
	}
	d := r.Outputs[0].Data
	return strconv.Itoa(slices.Index(d, slices.Max(d)))
}

// soakLoad is what the clients saw: latencies of good requests in the current interval,
// answers by model, and failures.
type soakLoad struct {
	targets []*soakTarget
	inf     string

	mu        sync.Mutex
	latencies []time.Duration // good requests, since the last sample
	all       []time.Duration // good requests, whole run
	answered  []int64         // good requests answered 200, per target
	correct   []int64         // ... whose top-1 was the label
	refused   []int64         // bad requests answered 4xx, per target
	failures  int64           // anything else: transport errors, 5xx, a good request refused
	firstFail []string
}

// client sends the target's requests in order, one at a time over one keep-alive
// connection, until stop is closed; one in soakBadEvery, at random, is a bad request.
func (l *soakLoad) client(i int, tg *soakTarget, seed uint64, stop <-chan struct{}) {
	c := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	defer c.CloseIdleConnections()
	rng := rand.New(rand.NewPCG(seed, 7))
	for n := int(seed); ; n++ {
		select {
		case <-stop:
			return
		default:
		}
		if rng.IntN(soakBadEvery) == 0 {
			b := tg.bad[rng.IntN(len(tg.bad))]
			status, body, _, err := soakPost(c, l.inf+tg.url, b.contentType, b.encoding, b.body)
			switch {
			case err != nil:
				l.fail(fmt.Sprintf("%s bad request: %v", tg.model, err))
			case status < 400 || status >= 500:
				l.fail(fmt.Sprintf("%s bad request: %d %s, want 4xx", tg.model, status, body))
			default:
				l.mu.Lock()
				l.refused[i]++
				l.mu.Unlock()
			}
			continue
		}
		k := n % len(tg.good)
		status, body, took, err := soakPost(c, l.inf+tg.url, tg.contentType, "", tg.good[k])
		switch {
		case err != nil:
			l.fail(fmt.Sprintf("%s: %v", tg.model, err))
		case status != 200:
			l.fail(fmt.Sprintf("%s: %d %s", tg.model, status, body))
		default:
			right := tg.top1(body) == tg.labels[k]
			l.mu.Lock()
			l.latencies = append(l.latencies, took)
			l.all = append(l.all, took)
			l.answered[i]++
			if right {
				l.correct[i]++
			}
			l.mu.Unlock()
		}
	}
}

func soakPost(c *http.Client, url, contentType, encoding string, body []byte) (int, []byte, time.Duration, error) {
	start := time.Now()
	req, err := http.NewRequest("POST", url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, 0, err
	}
	req.Header.Set("Content-Type", contentType)
	if encoding != "" {
		req.Header.Set("Content-Encoding", encoding)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, 0, err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, b, time.Since(start), err
}

func (l *soakLoad) fail(msg string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.failures++
	if len(l.firstFail) < 10 {
		l.firstFail = append(l.firstFail, msg)
	}
}

func (l *soakLoad) takeLatencies() []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	lat := l.latencies
	l.latencies = nil
	return lat
}

// report logs the answers per model and fails on any failed request, or on answers that
// stopped being right (every model is above 97% on its held-out set; 90% is the floor).
func (l *soakLoad) report(t *testing.T) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, tg := range l.targets {
		acc := float64(l.correct[i]) / float64(max(l.answered[i], 1))
		t.Logf("%-13s %7d good requests answered 200 (top-1 right %.4f), %5d bad ones answered 4xx", tg.model, l.answered[i], acc, l.refused[i])
		if l.answered[i] == 0 || acc < 0.9 {
			t.Errorf("%s: %d answers, top-1 accuracy %.4f < 0.9", tg.model, l.answered[i], acc)
		}
	}
	t.Logf("client latency over the run: p50 %v, p99 %v", soakQuantile(l.all, 0.5).Round(100*time.Microsecond), soakQuantile(l.all, 0.99).Round(100*time.Microsecond))
	if l.failures > 0 {
		t.Errorf("%d requests failed; the first: %s", l.failures, strings.Join(l.firstFail, "; "))
	}
}

// soakQuantile is the nearest-rank q-quantile; it sorts d.
func soakQuantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[int(math.Ceil(q*float64(len(d))))-1]
}

// soakInjectLeak makes the server grow on purpose (TORCHD_SOAK_INJECT_LEAK=1), so that a run
// shows the check failing on a real process: every interval it registers one more copy of
// ResNet-18 (RSS and worker goroutines) and opens 8 connections it never closes (fds and
// the goroutines serving them).
func soakInjectLeak(t *testing.T, s *server, stop <-chan struct{}) {
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	tick := time.NewTicker(soakEvery)
	defer tick.Stop()
	for n := 0; ; n++ {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		resp, err := http.Post(fmt.Sprintf("%s/models?url=resnet18.mar&model_name=leak%d&initial_workers=1&synchronous=true", s.mgmt, n), "", nil)
		if err != nil {
			t.Logf("inject: %v", err)
			continue
		}
		resp.Body.Close()
		for range 8 {
			c, err := net.Dial("tcp", strings.TrimPrefix(s.inf, "http://"))
			if err != nil {
				t.Logf("inject: %v", err)
				break
			}
			conns = append(conns, c)
		}
	}
}

// The verdict on made-up series: noise and a single spike pass; a steady leak of RSS,
// goroutines or fds, a stuck queue and a leaking queue count fail. This is the check that
// TestSoak applies, shown able to fail without a long run.
func TestSoakVerdict(t *testing.T) {
	const mib = 1 << 20
	targets := []*soakTarget{{model: "a"}}
	series := func(f func(i int, s *soakSample)) []soakSample {
		rng := rand.New(rand.NewPCG(1, 2))
		out := make([]soakSample, 60)
		for i := range out {
			s := &out[i]
			s.at = time.Duration(i+1) * soakEvery
			s.rss = (700 + 20*rng.Float64()) * mib
			s.goroutines = 40 + float64(rng.IntN(6))
			s.fds = 30 + float64(rng.IntN(3))
			s.threads = 20
			s.queue = []float64{float64(rng.IntN(soakClients + 1))}
			f(i, s)
			s.vmRSS = s.rss
		}
		return out
	}
	for _, c := range []struct {
		name string
		f    func(i int, s *soakSample)
		want string // in the one problem expected; "" for none
	}{
		{"noise", func(int, *soakSample) {}, ""},
		{"RSS spike", func(i int, s *soakSample) {
			if i == 55 {
				s.rss += 2048 * mib
			}
		}, ""},
		{"RSS +2 MiB per sample, under 10% from third to third", func(i int, s *soakSample) { s.rss += float64(2*i) * mib }, ""},
		{"RSS +5 MiB per sample", func(i int, s *soakSample) { s.rss += float64(5*i) * mib }, "RSS grew"},
		{"a goroutine per sample", func(i int, s *soakSample) { s.goroutines += float64(i) }, "goroutines grew"},
		{"an OS thread per sample", func(i int, s *soakSample) { s.threads += float64(i) }, "OS threads grew"},
		{"an fd every other sample", func(i int, s *soakSample) { s.fds += float64(i / 2) }, "open fds grew"},
		{"queue stuck full", func(i int, s *soakSample) {
			if i >= 30 {
				s.queue[0] = soakQueueSize
			}
		}, "capacity"},
		{"queue count leaks", func(i int, s *soakSample) { s.queue[0] = float64(i / 10) }, "reached"},
	} {
		got := soakVerdict(series(c.f), targets)
		switch {
		case c.want == "" && len(got) > 0:
			t.Errorf("%s: %q, want no problem", c.name, got)
		case c.want != "" && (len(got) == 0 || !strings.Contains(strings.Join(got, "\n"), c.want)):
			t.Errorf("%s: %q, want a problem with %q", c.name, got, c.want)
		}
	}
}
