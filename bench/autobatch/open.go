package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/torchd/torchd/internal/cpustat"
	"github.com/valyala/fasthttp"
)

// The open loop (-open): requests arrive at a fixed mean rate with exponential gaps (Poisson
// arrivals), whatever the server answers, as users' requests do. ab is a closed loop: each
// of its clients waits for an answer before sending again, so at high concurrency latency is
// concurrency / throughput, and a latency target cannot be judged there. In an open loop a
// setting either keeps up with the offered rate, and its p99 is what the batching costs, or
// it falls behind and its queue grows.

// openPoint is one open-loop run: the offered and answered rates, latency quantiles
// measured from each request's scheduled time (so a server that falls behind is charged
// for the wait, not only for the requests it answers: no coordinated omission), the
// requests not answered with 200, and the share of the CPU time stolen.
type openPoint struct {
	offered, answered float64 // per second
	p50, p99          float64 // ms
	failed            int
	steal             float64
}

// openTimeout is how long a request may take before it counts as failed.
const openTimeout = 10 * time.Second

// openLoop offers rate requests per second to the variant for seconds and waits for the
// answers (at most openTimeout after the last was sent).
func openLoop(client *fasthttp.Client, inf string, v *variant, body []byte, rate, seconds float64, seed uint64) openPoint {
	url := fmt.Sprintf("http://%s/predictions/%s", inf, v.name)
	rnd := rand.New(rand.NewPCG(seed, 1))
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		lat     []float64
		failed  atomic.Int64
		running = time.Duration(seconds * float64(time.Second))
	)
	c0, _ := cpustat.Read()
	start := time.Now()
	at := time.Duration(0)
	for {
		at += time.Duration(rnd.ExpFloat64() / rate * float64(time.Second))
		if at >= running {
			break
		}
		if d := time.Until(start.Add(at)); d > 0 {
			time.Sleep(d)
		}
		sched := start.Add(at)
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			defer fasthttp.ReleaseRequest(req)
			defer fasthttp.ReleaseResponse(resp)
			req.SetRequestURI(url)
			req.Header.SetMethod(fasthttp.MethodPost)
			req.Header.SetContentType(v.model.ctype)
			req.SetBodyRaw(body)
			err := client.DoTimeout(req, resp, openTimeout)
			ms := float64(time.Since(sched)) / 1e6
			if err != nil || resp.StatusCode() != fasthttp.StatusOK {
				failed.Add(1)
				ms = math.Inf(1)
			}
			mu.Lock()
			lat = append(lat, ms)
			mu.Unlock()
		}()
	}
	wg.Wait()
	c1, _ := cpustat.Read()
	sort.Float64s(lat)
	q := func(p float64) float64 {
		if len(lat) == 0 {
			return math.Inf(1)
		}
		return lat[min(len(lat)-1, int(math.Ceil(p*float64(len(lat))))-1)]
	}
	n := len(lat) - int(failed.Load())
	return openPoint{offered: float64(len(lat)) / seconds, answered: float64(n) / seconds, p50: q(0.50), p99: q(0.99),
		failed: int(failed.Load()), steal: cpustat.StealShare(c0, c1)}
}

// openRun runs every model's variants at its open-loop rates, rounds times in an order
// shuffled every round: res[model][rate][label] is the points of the rounds.
func openRun(inf, metrics string, models []*model, variants []*variant, rounds int) map[string]map[float64]map[string][]openPoint {
	client := &fasthttp.Client{MaxConnsPerHost: 4096, ReadTimeout: openTimeout, WriteTimeout: openTimeout}
	res := map[string]map[float64]map[string][]openPoint{}
	for _, m := range models {
		body, err := os.ReadFile(m.file)
		if err != nil {
			fatal("%v", err)
		}
		var vs []*variant
		for _, v := range variants {
			if v.model == m {
				vs = append(vs, v)
			}
		}
		res[m.name] = map[float64]map[string][]openPoint{}
		for _, rate := range m.rates {
			res[m.name][rate] = map[string][]openPoint{}
			for round := range rounds {
				order := rand.New(rand.NewPCG(uint64(rate), uint64(round))).Perm(len(vs))
				for _, i := range order {
					v := vs[i]
					x := openLoop(client, inf, v, body, rate, m.seconds*2, uint64(round*1000+i))
					d := drain(metrics, v.name)
					res[m.name][rate][v.label] = append(res[m.name][rate][v.label], x)
					fmt.Printf("%s %g/s round %d %-26s answered %8.1f/s  p50 %7.1f ms  p99 %7.1f ms  failed %d  stolen %4.1f%%  (drained in %.1f s)\n",
						m.name, rate, round+1, v.label, x.answered, x.p50, x.p99, x.failed, 100*x.steal, d.Seconds())
				}
			}
		}
	}
	return res
}

// openMedian is the median of each figure over the rounds, each on its own.
func openMedian(xs []openPoint) openPoint {
	med := func(f func(openPoint) float64) float64 {
		v := make([]float64, len(xs))
		for i, x := range xs {
			v[i] = f(x)
		}
		sort.Float64s(v)
		return v[len(v)/2]
	}
	return openPoint{
		offered: med(func(x openPoint) float64 { return x.offered }), answered: med(func(x openPoint) float64 { return x.answered }),
		p50: med(func(x openPoint) float64 { return x.p50 }), p99: med(func(x openPoint) float64 { return x.p99 }),
		failed: int(med(func(x openPoint) float64 { return float64(x.failed) })), steal: med(func(x openPoint) float64 { return x.steal }),
	}
}

func msCell(x float64) string {
	if math.IsInf(x, 1) {
		return "∞"
	}
	return fmt.Sprintf("%.1f", x)
}

func writeOpen(path string, models []*model, res map[string]map[float64]map[string][]openPoint, rounds int, scale float64, took time.Duration, curves string) {
	var b strings.Builder
	host, _ := os.Hostname()
	fmt.Fprintf(&b, "# Self-tuning batching in an open loop\n\n")
	fmt.Fprintf(&b, "Generated by `%s` (%d rounds, scale %g; `make bench-open` runs it with -rounds 3 -scale 0.5) on %s, %s, in %v.\n",
		commandLine(), rounds, scale, host, time.Now().UTC().Format("2006-01-02 15:04 MST"), took.Round(time.Second))
	fmt.Fprintf(&b, "The same server and variants as build/autobatch.md, but the load is an open loop: requests arrive at a fixed mean\n")
	fmt.Fprintf(&b, "rate with exponential gaps (Poisson arrivals) whatever the server answers, sent by a fasthttp client in this process\n")
	fmt.Fprintf(&b, "(it shares the 2 cores). Latency runs from each request's scheduled time, so a setting that falls behind is charged\n")
	fmt.Fprintf(&b, "for its queue; a request not answered with 200 within %v counts as failed and as infinitely late. Each round runs\n", openTimeout)
	fmt.Fprintf(&b, "every variant once per rate in an order shuffled every round; figures are medians of the %d rounds.\n", rounds)
	fmt.Fprintf(&b, "Targets: `auto` with a p99 target keeps p99 within it wherever a fixed setting does (the rate is offered, so\n")
	fmt.Fprintf(&b, "throughput is the rate for every setting that keeps up); `auto` without a target: the lowest latency at the offered\n")
	fmt.Fprintf(&b, "load, compared here with the fixed setting of the lowest p99. \"two copies\": one fixed setting per model is\n")
	fmt.Fprintf(&b, "registered twice; the lower of their median p99s over the higher is the noise floor of the p99 comparisons.\n\n")
	for _, m := range models {
		tl := targetLabel(m)
		tms := float64(m.target) / 1e6
		fmt.Fprintf(&b, "## %s (%s, %g s per point, target %v)\n\n", m.name, m.ctype, 2*m.seconds, m.target)
		fmt.Fprintf(&b, "| offered/s | auto, target: answered/s | p99 ms | | fixed settings within the target | auto: p99 ms | lowest fixed p99 ms | its setting | auto / lowest | two copies of %s: p99 lower / higher |\n", fixedLabel(m.copyOf[0], m.copyOf[1], 0))
		b.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
		for _, rate := range m.rates {
			r := res[m.name][rate]
			at, auto := openMedian(r[tl]), openMedian(r["auto"])
			var within []string
			lowL, low, n := "", math.Inf(1), 0
			for l, xs := range r {
				if !swept(l, tl) {
					continue
				}
				n++
				x := openMedian(xs)
				if x.p99 <= tms && x.failed == 0 {
					within = append(within, l)
				}
				if x.p99 < low {
					low, lowL = x.p99, l
				}
			}
			slices.Sort(within)
			verdict := "pass"
			switch {
			case len(within) == 0:
				verdict = "none meets it"
			case at.p99 > tms || at.failed > 0:
				verdict = "miss"
			}
			ratio := "–"
			if !math.IsInf(low, 1) && !math.IsInf(auto.p99, 1) {
				ratio = fmt.Sprintf("%.2f", auto.p99/low)
			}
			copies := copies(m, r, func(xs []openPoint) float64 { return openMedian(xs).p99 })
			fmt.Fprintf(&b, "| %g | %.1f | %s | %s | %d of %d: %s | %s | %s | %s | %s | %s |\n", rate, at.answered, msCell(at.p99), verdict,
				len(within), n, strings.Join(within, "; "), msCell(auto.p99), msCell(low), lowL, ratio, copies)
		}
		variantTable(&b, "Every variant (median answered/s / p50 ms / p99 ms; failed requests in brackets when any):", "offered/s",
			res[m.name][m.rates[0]], m.rates, func(rate float64, l string) string {
				x := openMedian(res[m.name][rate][l])
				c := fmt.Sprintf("%.1f / %s / %s", x.answered, msCell(x.p50), msCell(x.p99))
				if x.failed > 0 {
					c += fmt.Sprintf(" (%d)", x.failed)
				}
				return c
			})
	}
	b.WriteString(curves)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		fatal("%v", err)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		fatal("%v", err)
	}
	fmt.Printf("wrote %s\n", path)
}
