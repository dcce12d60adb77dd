// Command autobatch compares torchd's self-tuning batching (batch_size and max_batch_delay
// "auto") with a sweep of fixed settings, model by model and concurrency by concurrency, in
// one run on one server:
//
//	make bench-auto                      # or: go run ./bench/autobatch -rounds 5 -pairs 12 [-scale 0.5] [-c 1,64] [-models resnet18]
//
// Every variant is the same archive registered under its own name, so all of them are loaded
// side by side in one torchd and take turns: at each concurrency, each round runs every
// variant once with `ab -k` for the same time, in an order shuffled every round (seeded). The
// figure of a variant is its median requests/s over the rounds. With -pairs, a paired phase
// then measures auto against the rounds' best fixed setting in alternating short slices
// (paired.go). It writes build/autobatch.md.
//
// With -open (make bench-open) the load is an open loop instead (Poisson arrivals at each
// model's rates, see open.go), where a latency target can be judged; it writes
// build/autobatch-open.md.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/torchd/torchd/internal/cpustat"
)

type model struct {
	name, archive, file, ctype string
	batches                    []int
	delays                     []int // ms
	concs                      []int
	seconds                    float64       // of load per point
	rates                      []float64     // the open loop's offered rates (-open), requests/s
	target                     time.Duration // the latency target of the "auto, target" variant
	// copyOf is the fixed setting (batch, delay in ms) registered twice: the spread of two
	// identical settings is the noise floor of every comparison at that load.
	copyOf [2]int
	// oneThread are the batches swept (at every delay) with one intra-op thread per worker
	// as well as with the default (cores / workers): auto tunes the threads too.
	oneThread []int
}

// copySuffix marks the label of the second registration of copyOf. Copies are not fixed
// settings of the sweep: they are never the best one.
const copySuffix = " (copy)"

// swept reports whether label is one of the sweep's fixed settings (not auto, not the target
// variant tl, not the copy).
func swept(label, tl string) bool {
	return label != "auto" && label != tl && !strings.HasSuffix(label, copySuffix)
}

// fixedLabel is the label of a fixed setting, at threads intra-op threads per worker (0: the
// default, cores / workers).
func fixedLabel(b, d, threads int) string { return settingLabel(b, float64(d), threads) }

// settingLabel is the label of batch b, delay d ms (auto's may be fractional) and threads.
func settingLabel(b int, d float64, threads int) string {
	l := fmt.Sprintf("batch %d, delay %.3g ms", b, d)
	if d == math.Trunc(d) {
		l = fmt.Sprintf("batch %d, delay %d ms", b, int(d))
	}
	if threads > 0 {
		l += fmt.Sprintf(", %d thread", threads)
		if threads > 1 {
			l += "s"
		}
	}
	return l
}

// fixedVariant registers batch b with delay d ms and threads intra-op threads (0: the
// default) under a name ending in suffix.
func fixedVariant(m *model, b, d, threads int, suffix string) *variant {
	v := &variant{model: m, name: fmt.Sprintf("%s_b%d_d%d%s", m.name, b, d, suffix),
		label: fixedLabel(b, d, threads), query: fmt.Sprintf("batch_size=%d&max_batch_delay=%d", b, d)}
	if threads > 0 {
		v.name += fmt.Sprintf("_t%d", threads)
		v.query += fmt.Sprintf("&threads=%d", threads)
	}
	return v
}

// copies is the two copies' noise floor in a row ("–" without a copy): the lower of their
// figures over the higher, fig giving a label's figure.
func copies[P any](m *model, row map[string][]P, fig func([]P) float64) string {
	l := fixedLabel(m.copyOf[0], m.copyOf[1], 0)
	c, ok := row[l+copySuffix]
	if !ok {
		return "–"
	}
	return floor(fig(row[l]), fig(c))
}

type variant struct {
	model *model
	name  string // registered model name
	label string // "auto" or "batch 16, delay 0 ms"
	query string
	auto  bool
}

var (
	rps    = regexp.MustCompile(`Requests per second:\s+([\d.]+)`)
	p99Re  = regexp.MustCompile(`\n\s*99%\s+(\d+)`)
	failed = regexp.MustCompile(`Non-2xx responses:\s+(\d+)`)
)

// point is one ab run: requests/s, p99 in ms, and the share of the machine's CPU time the
// hypervisor stole during it.
type point struct{ rps, p99, steal float64 }

// served and corrected are a point's figures for the comparisons: requests/s as measured,
// and divided by the share of CPU time that was not stolen (see cpustat.StealShare).
func served(x point) float64    { return x.rps }
func corrected(x point) float64 { return x.rps / (1 - x.steal) }

func main() {
	bin := flag.String("torchd", "bin/torchd", "the torchd binary")
	store := flag.String("store", "model-store", "the model store")
	scale := flag.Float64("scale", 1, "multiplies every model's seconds of load per point")
	rounds := flag.Int("rounds", 7, "rounds per concurrency")
	concs := flag.String("c", "", "concurrencies (default: the harness's, per model)")
	only := flag.String("models", "", "comma-separated models to run (default: all)")
	out := flag.String("out", "build/autobatch.md", "the report")
	rerunSteal := flag.Float64("rerun-steal", 0.05, "run a point again (at most twice) when more than this share of the CPU time was stolen")
	copies := flag.Bool("copy", true, "register one fixed setting per model twice, to measure the noise floor")
	pairs := flag.Int("pairs", 0, "after the rounds at each concurrency, this many pairs of short slices of auto against the rounds' best fixed setting (and of the copy against its original): a paired estimate of their ratio (paired.go)")
	open := flag.Bool("open", false, "an open loop (Poisson arrivals at each model's rates) instead of ab's closed loop; the report goes to build/autobatch-open.md unless -out is given")
	flag.Parse()
	if *open && !isFlagSet("out") {
		*out = "build/autobatch-open.md"
	}

	// The concurrencies of the benchmark harness (bench/harness) for these workloads.
	models := []*model{
		{name: "digits_tensor", archive: "digits_tensor.mar", file: "models/out/digits/sample_tensor.npy", ctype: "application/x-npy",
			batches: []int{1, 8, 32}, delays: []int{0, 5}, concs: []int{1, 8, 16, 64, 256}, seconds: 4, target: 15 * time.Millisecond,
			rates: []float64{500, 2000, 4000}, copyOf: [2]int{32, 0}, oneThread: []int{8, 32}},
		{name: "resnet18", archive: "resnet18.mar", file: "models/out/resnet18/sample_640x480.jpg", ctype: "image/jpeg",
			batches: []int{1, 4, 8, 16}, delays: []int{0}, concs: []int{1, 8, 16, 64, 256}, seconds: 6, target: time.Second,
			rates: []float64{5, 12, 18}, copyOf: [2]int{8, 0}, oneThread: []int{8}},
	}
	if *concs != "" {
		var cs []int
		for _, f := range strings.Split(*concs, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil {
				fatal("bad -c: %v", err)
			}
			cs = append(cs, n)
		}
		for _, m := range models {
			m.concs = cs
		}
	}
	if *only != "" {
		var keep []*model
		for _, m := range models {
			if slices.Contains(strings.Split(*only, ","), m.name) {
				keep = append(keep, m)
			}
		}
		if len(keep) == 0 {
			fatal("-models %q: none of digits_tensor, resnet18", *only)
		}
		models = keep
	}
	for _, m := range models {
		m.seconds *= *scale
	}

	inf, mgmt, metrics := "127.0.0.1:18580", "127.0.0.1:18581", "127.0.0.1:18582"
	cache, _ := os.MkdirTemp("", "autobatch-cache-")
	defer os.RemoveAll(cache)
	cmd := exec.Command(*bin, "serve", "--model-store", *store, "--inference-address", inf, "--management-address", mgmt,
		"--metrics-address", metrics, "--access-log=false", "--enable-snapshots=false", "--job-queue-size", "1024",
		"--grpc-address=", "--grpc-inference-address=", "--grpc-management-address=")
	cmd.Env = append(os.Environ(), "TORCHD_CACHE_DIR="+cache)
	logf, _ := os.Create(filepath.Join(os.TempDir(), "autobatch-torchd.log"))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		fatal("start torchd: %v", err)
	}
	defer func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() }()
	for i := 0; ; i++ {
		if r, err := http.Get("http://" + inf + "/ping"); err == nil {
			r.Body.Close()
			break
		}
		if i > 100 {
			fatal("torchd did not start (log: %s)", logf.Name())
		}
		time.Sleep(100 * time.Millisecond)
	}

	var variants []*variant
	for _, m := range models {
		variants = append(variants, &variant{model: m, name: m.name + "_auto", label: "auto", auto: true,
			query: "batch_size=auto&max_batch_delay=auto"})
		variants = append(variants, &variant{model: m, name: m.name + "_auto_target", label: targetLabel(m), auto: true,
			query: fmt.Sprintf("batch_size=auto&max_batch_delay=auto&latency_target_ms=%d", m.target.Milliseconds())})
		for _, b := range m.batches {
			for _, d := range m.delays {
				if b == 1 && d > 0 {
					continue
				}
				variants = append(variants, fixedVariant(m, b, d, 0, ""))
				if slices.Contains(m.oneThread, b) {
					variants = append(variants, fixedVariant(m, b, d, 1, ""))
				}
			}
		}
		if *copies {
			v := fixedVariant(m, m.copyOf[0], m.copyOf[1], 0, "_copy")
			v.label += copySuffix
			variants = append(variants, v)
		}
	}
	start := time.Now()
	for _, v := range variants {
		u := fmt.Sprintf("http://%s/models?url=%s&model_name=%s&initial_workers=1&synchronous=true&%s", mgmt, v.model.archive, v.name, v.query)
		r, err := http.Post(u, "", nil)
		if err != nil || r.StatusCode != 200 {
			fatal("register %s: %v %v", v.name, err, r)
		}
		r.Body.Close()
	}
	fmt.Printf("registered %d variants in %v\n", len(variants), time.Since(start).Round(time.Millisecond))
	if *open {
		res := openRun(inf, metrics, models, variants, *rounds)
		writeOpen(*out, models, res, *rounds, *scale, time.Since(start), describe(mgmt, variants))
		return
	}

	// results[model][conc][label] = per-round points
	results := map[string]map[int]map[string][]point{}
	paired := map[string]map[int][]*comparison{}
	reruns := 0
	for _, m := range models {
		results[m.name] = map[int]map[string][]point{}
		paired[m.name] = map[int][]*comparison{}
		for _, c := range m.concs {
			results[m.name][c] = map[string][]point{}
			var vs []*variant
			for _, v := range variants {
				if v.model == m {
					vs = append(vs, v)
				}
			}
			for round := range *rounds {
				// A new order every round: a rotation would give every variant the same
				// predecessor in every round (auto always ran after the last fixed setting).
				order := rand.New(rand.NewPCG(uint64(c), uint64(round))).Perm(len(vs))
				for _, i := range order {
					v := vs[i]
					x := ab(inf, v, c, m.seconds)
					d := drain(metrics, v.name)
					// A point during which the hypervisor took much of the CPU is run
					// again, at most twice; the run with the least stolen time is kept.
					for retry := 0; x.steal > *rerunSteal && retry < 2; retry++ {
						fmt.Printf("%s c=%d round %d %-26s %8.1f req/s with %.0f%% of the CPU time stolen: again\n", m.name, c, round+1, v.label, x.rps, 100*x.steal)
						reruns++
						if y := ab(inf, v, c, m.seconds); y.steal < x.steal {
							x = y
						}
						d = drain(metrics, v.name)
					}
					results[m.name][c][v.label] = append(results[m.name][c][v.label], x)
					fmt.Printf("%s c=%d round %d %-26s %8.1f req/s  p99 %6.0f ms  stolen %4.1f%%  (drained in %.1f s)\n", m.name, c, round+1, v.label, x.rps, x.p99, 100*x.steal, d.Seconds())
				}
			}
			if *pairs > 0 {
				paired[m.name][c] = pairedRun(inf, mgmt, metrics, m, c, vs, results[m.name][c], *pairs)
			}
		}
	}
	curves := describe(mgmt, variants)
	write(*out, models, results, paired, *pairs, *rounds, *scale, *rerunSteal, reruns, time.Since(start), curves)
}

// describe is the describe output of every auto variant, for the report.
func describe(mgmt string, variants []*variant) string {
	var curves strings.Builder
	for _, v := range variants {
		if !v.auto {
			continue
		}
		r, err := http.Get(fmt.Sprintf("http://%s/models/%s", mgmt, v.name))
		if err == nil {
			sc := bufio.NewScanner(r.Body)
			sc.Buffer(make([]byte, 1<<20), 1<<20)
			var b strings.Builder
			for sc.Scan() {
				b.WriteString(sc.Text() + "\n")
			}
			r.Body.Close()
			fmt.Fprintf(&curves, "<details><summary>describe %s after the run</summary>\n\n```json\n%s```\n</details>\n\n", v.name, b.String())
		}
	}
	return curves.String()
}

// drain waits until the variant has answered every request it was sent, so that the next
// variant's point does not share the machine with the end of this one (ab stops at its time
// limit with requests still out; on this VM the wait took 0.0–0.7 s, so little is left).
// Idle is no answer and an empty queue for 700 ms (longer than any forward of the sweep),
// at most a minute; it returns how long the variant took to go idle.
func drain(metrics, name string) time.Duration {
	answered := func() (n, queued float64) {
		r, err := http.Get("http://" + metrics + "/metrics")
		if err != nil {
			fatal("metrics: %v", err)
		}
		defer r.Body.Close()
		sc := bufio.NewScanner(r.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		label := `model="` + name + `"`
		for sc.Scan() {
			line := sc.Text()
			if !strings.Contains(line, label) {
				continue
			}
			f := strings.Fields(line)
			x, _ := strconv.ParseFloat(f[len(f)-1], 64)
			switch {
			case strings.HasPrefix(line, "torchd_requests_total{"):
				n += x
			case strings.HasPrefix(line, "torchd_queue_depth{"):
				queued += x
			}
		}
		return n, queued
	}
	start := time.Now()
	last, _ := answered()
	stable := start
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		n, q := answered()
		if n != last || q > 0 {
			last, stable = n, time.Now()
		} else if time.Since(stable) >= 700*time.Millisecond {
			return stable.Sub(start)
		}
	}
	fmt.Fprintf(os.Stderr, "autobatch: %s still busy a minute after its point\n", name)
	return time.Since(start)
}

func isFlagSet(name string) (set bool) {
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

func targetLabel(m *model) string { return fmt.Sprintf("auto, p99 target %v", m.target) }

// ab runs one point; ab reads -t in whole seconds.
func ab(inf string, v *variant, c int, seconds float64) point {
	c0, _ := cpustat.Read()
	out, err := exec.Command("ab", "-k", "-q", "-c", strconv.Itoa(c), "-t", strconv.Itoa(max(1, int(math.Round(seconds)))), "-n", "10000000", "-s", "120",
		"-T", v.model.ctype, "-p", v.model.file, fmt.Sprintf("http://%s/predictions/%s", inf, v.name)).CombinedOutput()
	m, p := rps.FindSubmatch(out), p99Re.FindSubmatch(out)
	if err != nil || m == nil || p == nil {
		fatal("ab %s c=%d: %v\n%s", v.name, c, err, out)
	}
	if f := failed.FindSubmatch(out); f != nil {
		fatal("ab %s c=%d: %s non-2xx answers\n%s", v.name, c, f[1], out)
	}
	x, _ := strconv.ParseFloat(string(m[1]), 64)
	y, _ := strconv.ParseFloat(string(p[1]), 64)
	c1, _ := cpustat.Read()
	return point{x, y, cpustat.StealShare(c0, c1)}
}

// median is the median of the rounds' requests/s, p99 and stolen share, each on its own.
func median(x []point) point { return medianBy(x, served) }

// bestFixed is the swept fixed setting with the highest median req/s in a row of rounds, and
// the one among those whose median p99 met the model's target ("" where none did).
func bestFixed(m *model, r map[string][]point) (best, within string) {
	tl := targetLabel(m)
	var b, in float64
	for l, xs := range r {
		if !swept(l, tl) {
			continue
		}
		x := median(xs)
		if x.rps > b {
			best, b = l, x.rps
		}
		if x.p99 <= float64(m.target.Milliseconds()) && x.rps > in {
			within, in = l, x.rps
		}
	}
	return best, within
}

// medianBy is median with the requests/s figure f.
func medianBy(x []point, f func(point) float64) point {
	r := make([]float64, len(x))
	p := make([]float64, len(x))
	st := make([]float64, len(x))
	for i, v := range x {
		r[i], p[i], st[i] = f(v), v.p99, v.steal
	}
	sort.Float64s(r)
	sort.Float64s(p)
	sort.Float64s(st)
	return point{r[len(r)/2], p[len(p)/2], st[len(st)/2]}
}

// commandLine is the command that wrote a report, with the flags it was given.
func commandLine() string {
	return strings.Join(append([]string{"go run ./bench/autobatch"}, os.Args[1:]...), " ")
}

func write(path string, models []*model, res map[string]map[int]map[string][]point, paired map[string]map[int][]*comparison, pairs, rounds int, scale, rerunSteal float64, reruns int, took time.Duration, curves string) {
	var b strings.Builder
	host, _ := os.Hostname()
	fmt.Fprintf(&b, "# Self-tuning batching against a sweep of fixed settings\n\n")
	fmt.Fprintf(&b, "Generated by `%s` (%d rounds, scale %g, rerun over %g stolen; `make bench-auto` and the last step of `make bench` run it with -rounds 5 -pairs 12) on %s, %s, in %v.\n",
		commandLine(), rounds, scale, rerunSteal, host, time.Now().UTC().Format("2006-01-02 15:04 MST"), took.Round(time.Second))
	fmt.Fprintf(&b, "One torchd serves every variant of a model side by side (the same archive under several names, one worker each,\n")
	fmt.Fprintf(&b, "intra-op threads = cores unless a label says \"1 thread\"; auto tunes them too); at each concurrency each round\n")
	fmt.Fprintf(&b, "runs every variant once with `ab -k -t <seconds>`, in an\n")
	fmt.Fprintf(&b, "order shuffled every round (seeded). Figures are medians of the rounds (requests/s; p99 in ms from ab's percentile table).\n")
	fmt.Fprintf(&b, "Targets: `auto` ≥ 0.95 × the best fixed setting at every concurrency; `auto` with a p99 target keeps p99 within it\n")
	fmt.Fprintf(&b, "and serves ≥ 0.90 × the best fixed setting whose p99 also meets it (where one does: ab is a closed loop, so at high\n")
	fmt.Fprintf(&b, "concurrency latency is concurrency / throughput and no batch setting can meet a tight target).\n")
	fmt.Fprintf(&b, "\"held out\": the same comparison without the winner's curse (the best of several noisy medians is biased\n")
	fmt.Fprintf(&b, "upwards): for each round the best fixed setting is chosen on the other rounds, auto is divided by that setting's\n")
	fmt.Fprintf(&b, "figure in this round, and the column is the median of these ratios (in brackets: their range over the rounds).\n")
	fmt.Fprintf(&b, "\"two copies\": one fixed setting per model is registered twice (a second name, its own model copy and worker);\n")
	fmt.Fprintf(&b, "the lower of the two medians over the higher is what identical settings differ by at that concurrency, the noise\n")
	fmt.Fprintf(&b, "floor of every ratio in the row. The copy is not a setting of the sweep: it is never the best fixed one.\n")
	fmt.Fprintf(&b, "Stolen CPU time: this VM's hypervisor takes 0–50%% of the CPU time in bursts of seconds, and a forward's threads\n")
	fmt.Fprintf(&b, "wait for each other, so a point loses up to twice its stolen share (or far more). A point with more than %.0f%% of\n", 100*rerunSteal)
	fmt.Fprintf(&b, "the machine's CPU time stolen (from /proc/stat) was run again, at most twice, keeping the least stolen run:\n")
	fmt.Fprintf(&b, "%d reruns in this run.\n\n", reruns)
	for _, m := range models {
		tl := targetLabel(m)
		fmt.Fprintf(&b, "## %s (%s, %g s per point)\n\n", m.name, m.ctype, m.seconds)
		fmt.Fprintf(&b, "| c | auto req/s | best fixed | its req/s | auto / best | | held out | two copies of %s: lower / higher | auto, target %v: req/s | p99 ms | best fixed within %v | its req/s | ratio | |\n",
			fixedLabel(m.copyOf[0], m.copyOf[1], 0), m.target, m.target)
		b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, c := range m.concs {
			r := res[m.name][c]
			auto, at := median(r["auto"]), median(r[tl])
			bestL, inL := bestFixed(m, r)
			best, in := median(r[bestL]), point{}
			if inL != "" {
				in = median(r[inL])
			}
			verdict := "pass"
			if auto.rps < 0.95*best.rps {
				verdict = "miss"
			}
			tv, ratio := "no fixed setting meets it", "–"
			if inL != "" {
				ratio = fmt.Sprintf("%.2f", at.rps/in.rps)
				tv = "pass"
				if at.p99 > float64(m.target.Milliseconds()) || at.rps < 0.9*in.rps {
					tv = "miss"
				}
			} else {
				inL = "none"
			}
			held := "–"
			if h := heldOut(r, tl, served); len(h) > 0 {
				held = fmt.Sprintf("%.2f (%.2f–%.2f)", h[len(h)/2], h[0], h[len(h)-1])
			}
			copies := copies(m, r, func(xs []point) float64 { return median(xs).rps })
			fmt.Fprintf(&b, "| %d | %.1f | %s | %.1f | %.2f | %s | %s | %s | %.1f | %.0f | %s | %.1f | %s | %s |\n",
				c, auto.rps, bestL, best.rps, auto.rps/best.rps, verdict, held, copies, at.rps, at.p99, inL, in.rps, ratio, tv)
		}
		writePaired(&b, m, paired[m.name], pairs)
		// At c=1 every setting without a delay at the default threads runs batches of one: the same work, so their
		// spread is the noise floor of these comparisons.
		if r := res[m.name][m.concs[0]]; m.concs[0] == 1 {
			spread := func(f func(point) float64) (lo, hi float64) {
				for l, xs := range r {
					if strings.HasSuffix(l, "delay 0 ms") { // not the copy, not one thread
						x := medianBy(xs, f).rps
						if lo == 0 || x < lo {
							lo = x
						}
						hi = max(hi, x)
					}
				}
				return lo, hi
			}
			if lo, hi := spread(served); hi > 0 {
				clo, chi := spread(corrected)
				fmt.Fprintf(&b, "\nNoise floor: at c=1 the fixed settings without a delay (default threads) all run batches of one (the same work); their medians span %.1f–%.1f req/s, a ratio of %.2f (corrected for stolen time: %.2f).\n", lo, hi, lo/hi, clo/chi)
			}
		}
		fmt.Fprintf(&b, "\nCorrected for stolen CPU time: each point's req/s divided by 1 − the share of the machine's CPU time the\n")
		fmt.Fprintf(&b, "hypervisor stole while it ran (from /proc/stat), then the same comparisons:\n\n")
		b.WriteString("| c | stolen: median (range) of the points | auto / best | best fixed | | held out |\n|---|---|---|---|---|---|\n")
		for _, c := range m.concs {
			r := res[m.name][c]
			var st []float64
			for _, xs := range r {
				for _, x := range xs {
					st = append(st, x.steal)
				}
			}
			sort.Float64s(st)
			auto := medianBy(r["auto"], corrected)
			bestL, best := "", 0.0
			for l, xs := range r {
				if swept(l, tl) {
					if x := medianBy(xs, corrected).rps; x > best {
						bestL, best = l, x
					}
				}
			}
			verdict, held := "pass", "–"
			if auto.rps < 0.95*best {
				verdict = "miss"
			}
			if h := heldOut(r, tl, corrected); len(h) > 0 {
				held = fmt.Sprintf("%.2f (%.2f–%.2f)", h[len(h)/2], h[0], h[len(h)-1])
			}
			fmt.Fprintf(&b, "| %d | %.1f%% (%.1f–%.1f%%) | %.2f | %s | %s | %s |\n", c, 100*st[len(st)/2], 100*st[0], 100*st[len(st)-1], auto.rps/best, bestL, verdict, held)
		}
		variantTable(&b, "Every variant (median req/s / p99 ms):", "c", res[m.name][m.concs[0]], m.concs, func(c int, l string) string {
			x := median(res[m.name][c][l])
			return fmt.Sprintf("%.1f / %.0f", x.rps, x.p99)
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

// variantTable writes a table of every variant: a row per load (a concurrency or a rate), a
// column per label (the keys of first, sorted), and cell's figures in each.
func variantTable[L int | float64, P any](b *strings.Builder, title, loadHead string, first map[string]P, loads []L, cell func(L, string) string) {
	fmt.Fprintf(b, "\n%s\n\n| %s |", title, loadHead)
	labels := slices.Sorted(maps.Keys(first))
	for _, l := range labels {
		fmt.Fprintf(b, " %s |", l)
	}
	fmt.Fprintf(b, "\n|---|%s\n", strings.Repeat("---|", len(labels)))
	for _, x := range loads {
		fmt.Fprintf(b, "| %v |", x)
		for _, l := range labels {
			fmt.Fprintf(b, " %s |", cell(x, l))
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
}

// heldOut is auto against the best fixed setting without the winner's curse: for each
// round, the setting with the best median over the other rounds is picked, and auto is
// divided by that setting's figure in this round (measured next to auto's); these ratios,
// sorted (the report gives their median and range). The best of several noisy medians is
// biased upwards: on this machine even identical settings differ by 20% at c=1.
func heldOut(r map[string][]point, targetLabel string, f func(point) float64) []float64 {
	auto := r["auto"]
	var ratios []float64
	if len(auto) < 2 {
		return nil // no other rounds to choose on
	}
	for i := range auto {
		bestL, best := "", 0.0
		for l, xs := range r {
			if !swept(l, targetLabel) || len(xs) != len(auto) {
				continue
			}
			others := append(append([]point{}, xs[:i]...), xs[i+1:]...)
			if x := medianBy(others, f).rps; x > best {
				best, bestL = x, l
			}
		}
		if bestL != "" && f(r[bestL][i]) > 0 {
			ratios = append(ratios, f(auto[i])/f(r[bestL][i]))
		}
	}
	sort.Float64s(ratios)
	return ratios
}

// floor is the ratio of the lower of two identical settings' figures to the higher: the
// noise floor of a comparison ("–" when one is missing or infinite).
func floor(a, b float64) string {
	if a <= 0 || b <= 0 || math.IsInf(a, 1) || math.IsInf(b, 1) {
		return "–"
	}
	return fmt.Sprintf("%.2f", min(a, b)/max(a, b))
}

func fatal(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "autobatch: "+format+"\n", args...)
	os.Exit(1)
}
