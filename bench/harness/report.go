package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// summary is one point's runs reduced: medians, except errors (summed) and peak RSS (max).
type summary struct {
	N                       int
	RPS, P50, P90, P99, Max float64
	Errors, Complete        int
	MeanBatch               float64
	PeakRSS                 int64
	CPUPer1k                float64
	ClientCPUPct            float64
	Curve                   []float64 // the run with the median throughput
	Cmd                     string
}

func summarize(runs []run) (s summary, ok bool) {
	if len(runs) == 0 {
		return s, false
	}
	s.N = len(runs)
	col := func(f func(r run) float64) float64 {
		v := make([]float64, len(runs))
		for i, r := range runs {
			v[i] = f(r)
		}
		return median(v)
	}
	s.RPS = col(func(r run) float64 { return r.RPS })
	s.P50 = col(func(r run) float64 { return r.P50 })
	s.P90 = col(func(r run) float64 { return r.P90 })
	s.P99 = col(func(r run) float64 { return r.P99 })
	s.Max = col(func(r run) float64 { return r.Max })
	s.MeanBatch = col(func(r run) float64 { return r.MeanBatch })
	s.CPUPer1k = col(func(r run) float64 { return r.CPUPer1k })
	s.ClientCPUPct = col(func(r run) float64 {
		if r.Seconds == 0 {
			return 0
		}
		return r.ClientCPU / r.Seconds * 100
	})
	sorted := slices.Clone(runs)
	slices.SortFunc(sorted, func(a, b run) int { return cmpFloat(a.RPS, b.RPS) })
	mid := sorted[len(sorted)/2]
	s.Curve, s.Cmd = mid.Curve, mid.Cmd
	for _, r := range runs {
		s.Errors += r.Errors
		s.Complete += r.Complete
		s.PeakRSS = max(s.PeakRSS, r.PeakRSS)
	}
	return s, true
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (r *results) point(w string, c int, server, tool string) (summary, bool) {
	return summarize(r.Runs[pointKey{w, c, server, tool}.String()])
}

func ms(v float64) string {
	switch {
	case v == 0:
		return "–"
	case v < 10:
		return fmt.Sprintf("%.2f", v)
	case v < 100:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.0f", v)
}

func rps(v float64) string {
	if v < 100 {
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.0f", v)
}

func mib(b int64) string { return fmt.Sprintf("%.0f", float64(b)/(1<<20)) }

func dur(ns int64) string {
	d := time.Duration(ns)
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%.0f µs", float64(d)/1e3)
	case d < 100*time.Millisecond:
		return fmt.Sprintf("%.2f ms", float64(d)/1e6)
	}
	return fmt.Sprintf("%.0f ms", float64(d)/1e6)
}

// target is one row of the targets table.
type target struct {
	What, Want, Measured string
	Pass, Known          bool // Known: it could be measured
}

func passMiss(t target) string {
	switch {
	case !t.Known:
		return "not measured"
	case t.Pass:
		return "**pass**"
	}
	return "**miss**"
}

func (r *results) targets(cfg *config) []target {
	var ts []target

	// 1. resnet18 640 at c=64 against the in-process ceiling.
	t := target{What: "resnet18, 640×480 JPEG, c=64, tuned batching (" + r.Batching["resnet18"] + ")", Want: "≥ 0.90 × the in-process ceiling"}
	if s, ok := r.point("resnet18-640", 64, "torchd", "ab"); ok {
		if c, ok := r.ceilingAt("resnet18-640", 64); ok {
			f := s.RPS / c.throughput
			t.Known, t.Pass = true, f >= 0.90
			t.Measured = fmt.Sprintf("%s req/s = **%.2f ×** the ceiling's %s req/s (batch %d, %s)", rps(s.RPS), f, rps(c.throughput), c.batch, c.source)
		}
	}
	ts = append(ts, t)

	// 2. resnet18 at c=1: p50 against the in-process single-request latency.
	t = target{What: "resnet18, 640×480 JPEG, c=1, p50 latency", Want: "≤ the ceiling's single-request latency + 1 ms"}
	if s, ok := r.point("resnet18-640", 1, "torchd", "ab"); ok {
		if c, ok := r.ceilingAt("resnet18-640", 1); ok {
			single := c.singleNs / 1e6
			t.Known, t.Pass = true, s.P50 <= single+1
			t.Measured = fmt.Sprintf("p50 %s ms against %s ms in-process (%s): **%+.2f ms**", ms(s.P50), ms(single), c.source, s.P50-single)
		}
	}
	ts = append(ts, t)

	// 3. digits PNG at c=32.
	t = target{What: "digits PNG, c=32", Want: "≥ 5,000 req/s"}
	sa, okA := r.point("digits-png", 32, "torchd", "ab")
	sw, okW := r.point("digits-png", 32, "torchd", "wrk")
	if okA || okW {
		best := max(sa.RPS, sw.RPS)
		t.Known, t.Pass = true, best >= 5000
		var parts []string
		if okW {
			parts = append(parts, fmt.Sprintf("**%s req/s** with wrk (p99 %s ms)", rps(sw.RPS), ms(sw.P99)))
		}
		if okA {
			parts = append(parts, fmt.Sprintf("%s req/s with ab (ab itself at %.0f%% of a core)", rps(sa.RPS), sa.ClientCPUPct))
		}
		t.Measured = strings.Join(parts, "; ")
	}
	ts = append(ts, t)

	// 4, 5. Against the Python batching baseline.
	vsPeer := func(w, peer, label string, minRatio, p99Ratio float64, p99Lower bool) target {
		want := fmt.Sprintf("throughput ≥ %.1f×", minRatio)
		if p99Lower {
			want += ", and p99 lower"
		} else {
			want += fmt.Sprintf(", p99 ≤ %.1f×", p99Ratio)
		}
		t := target{What: label, Want: want}
		a, ok1 := r.point(w, 64, "torchd", "ab")
		b, ok2 := r.point(w, 64, peer, "ab")
		if !ok1 || !ok2 || b.RPS == 0 || b.P99 == 0 {
			if why, ok := r.Unavailable[peer]; ok {
				t.Measured = peer + " did not run: " + why
			}
			return t
		}
		tr, pr := a.RPS/b.RPS, a.P99/b.P99
		t.Known = true
		if p99Lower {
			t.Pass = tr >= minRatio && pr < 1
		} else {
			t.Pass = tr >= minRatio && pr <= p99Ratio
		}
		t.Measured = fmt.Sprintf("**%.2f×** (%s against %s req/s); p99 **%.2f×** (%s against %s ms)", tr, rps(a.RPS), rps(b.RPS), pr, ms(a.P99), ms(b.P99))
		return t
	}
	ts = append(ts, vsPeer("digits-png", "tornado", "digits PNG, c=64, against the Python batching baseline", 3, 0, true))
	ts = append(ts, vsPeer("resnet18-640", "tornado", "resnet18 640×480, c=64, against the Python batching baseline", 1.0, 0.7, false))

	// 6. Against TorchServe.
	ts = append(ts, vsPeer("digits-png", "torchserve", "digits PNG, c=64, against TorchServe", 2, 0.5, false))
	ts = append(ts, vsPeer("resnet18-640", "torchserve", "resnet18 640×480, c=64, against TorchServe", 1.1, 0.5, false))
	t = target{What: "peak RSS against TorchServe (all three models loaded, over the whole run)", Want: "≤ 1/3"}
	var tdRSS, tsRSS int64
	for _, s := range r.Servers {
		switch s.Name {
		case "torchd":
			tdRSS = s.PeakRSS
		case "torchserve":
			tsRSS = s.PeakRSS
		}
	}
	if tdRSS > 0 && tsRSS > 0 {
		f := float64(tdRSS) / float64(tsRSS)
		t.Known, t.Pass = true, f <= 1.0/3
		t.Measured = fmt.Sprintf("%s MiB against %s MiB: **%.2f×**", mib(tdRSS), mib(tsRSS), f)
	} else if why, ok := r.Unavailable["torchserve"]; ok {
		t.Measured = "torchserve did not run: " + why
	}
	ts = append(ts, t)

	// 7. Cold start.
	t = target{What: "cold start: exec of `torchd serve --models resnet18.mar,digits.mar` to the first 200 on /ping (models loaded and warm)", Want: "≤ 1.5 s"}
	if len(r.ColdStart) > 0 {
		m := median(r.ColdStart)
		var each []string
		for _, v := range r.ColdStart {
			each = append(each, fmt.Sprintf("%.2f", v))
		}
		t.Known, t.Pass = true, m <= 1.5
		t.Measured = fmt.Sprintf("**%.2f s** (runs: %s s)", m, strings.Join(each, ", "))
		if len(r.ColdStartStored) > 0 {
			t.Measured += fmt.Sprintf("; %.2f s with resnet18.mar uncompressed (`--archive-format zip-store`)", median(r.ColdStartStored))
		}
	} else if r.ColdStartErr != "" {
		t.Measured = r.ColdStartErr
	}
	ts = append(ts, t)

	// 8. Server overhead.
	t = target{What: "server overhead per request: digits_tensor (.npy in), c=1, end-to-end p50 minus the in-process request", Want: "≤ 150 µs"}
	if s, ok := r.point("digits-tensor", 1, "torchd", "ab"); ok {
		if c, ok := r.ceilingAt("digits-tensor", 1); ok {
			single := c.singleNs / 1e3
			ov := s.P50*1e3 - single
			t.Known, t.Pass = true, ov <= 150
			t.Measured = fmt.Sprintf("p50 %.0f µs − %.0f µs in-process (%s) = **%.0f µs**", s.P50*1e3, single, c.source, ov)
		}
	}
	ts = append(ts, t)
	return ts
}

// ceilingRef is the in-process figure a target compares with.
type ceilingRef struct {
	throughput float64 // requests/s at the best batch size
	batch      int
	singleNs   float64 // one request end to end
	source     string  // where it comes from, for the table
}

// ceilingAt is the median of the probes run between the rounds of point (w, c), or the
// ceiling measured at the start when there are none.
func (r *results) ceilingAt(w string, c int) (ceilingRef, bool) {
	if ps := r.Probes[probeKey(w, c)]; len(ps) > 0 {
		var thr, single []float64
		for _, p := range ps {
			thr = append(thr, p.Best.Throughput)
			single = append(single, float64(p.SingleN))
		}
		return ceilingRef{median(thr), ps[0].Best.Batch, median(single),
			fmt.Sprintf("median of %d in-process probes between the rounds", len(ps))}, true
	}
	if ce := r.Ceilings[w]; ce != nil {
		return ceilingRef{ce.Best.Throughput, ce.Best.Batch, float64(ce.SingleN), "measured before the servers started"}, true
	}
	return ceilingRef{}, false
}

const (
	beginMarker = "<!-- make bench: begin. Generated by bench/harness; edits between the markers are overwritten. -->"
	endMarker   = "<!-- make bench: end -->"
)

// writeReport writes the plots and the markdown section, spliced into cfg.doc between the
// markers (inserted before the first "## " section the first time).
func writeReport(cfg *config, r *results) error {
	if err := writePlots(cfg, r); err != nil {
		return err
	}
	section := renderSection(cfg, r)
	old, err := os.ReadFile(cfg.doc)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	var doc string
	switch {
	case len(old) == 0:
		doc = "# Benchmarks\n\n" + section
	case bytes.Contains(old, []byte(beginMarker)) && bytes.Contains(old, []byte(endMarker)):
		s := string(old)
		i := strings.Index(s, beginMarker)
		j := strings.Index(s, endMarker) + len(endMarker)
		doc = s[:i] + strings.TrimSuffix(section, "\n") + s[j:]
	default:
		s := string(old)
		i := strings.Index(s, "\n## ")
		if i < 0 {
			doc = s + "\n" + section
		} else {
			doc = s[:i+1] + section + "\n" + s[i+1:]
		}
	}
	return os.WriteFile(cfg.doc, []byte(doc), 0o644)
}

func renderSection(cfg *config, r *results) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	m := r.Machine
	p("%s\n## torchd side by side with its peers (`make bench`)\n\n", beginMarker)
	mode := "the full run"
	if cfg.quick {
		mode = "the smoke run (`make bench-smoke`: one short run per point; it checks that the harness works, not the speed)"
	}
	p("Generated by `make bench` (`go run ./bench/harness`), %s, on %s (%s–%s UTC, %s).\n\n", mode,
		r.Started.UTC().Format("2006-01-02"), r.Started.UTC().Format("15:04"), r.Finished.UTC().Format("15:04"),
		r.Finished.Sub(r.Started).Round(time.Second))
	p("**Machine.** %d × %s, %.0f GiB, %s, kernel %s; %s. Load average at the start %s (other tenants' jobs);"+
		" the hypervisor stole %.0f CPU-seconds during the run. %s, %s, Python %s. LibTorch %s. No GPU is lent to"+
		" this task: every figure is CPU-only.\n\n",
		m.Cores, m.CPU, m.MemGiB, m.OS, m.Kernel, m.Go, m.LoadAvg, r.StolenSeconds, m.AB, m.Wrk, m.Python, ceilingLibTorch(r))
	p("**Method.** Every server runs at the same time on the same 2 cores, loads the same TorchScript files"+
		" (`models/out/*/model.pt`), and takes its turn point by point: at each concurrency, each"+
		" round runs every server once, in an order that rotates every round, so the shared host's drift falls on all"+
		" of them alike. Figures are medians over rounds (%d for torchd and the main peers, %d for the servers marked *secondary*);"+
		" errors are summed; peak RSS is the largest resident memory of the server's whole process tree (JVM and Python"+
		" workers included) sampled every %v. CPU is the process tree's user + system time per 1,000 completed requests."+
		" Mean batch is torchd's own `torchd_batch_size` histogram (sum / count) over the run. Load is the community's"+
		" `ab -k` (as in MMS's and TorchServe's published benchmarks), bounded by time so that every server gets the same"+
		" window; the digits PNG point at c=32 is measured again with `wrk` (one thread), where ab, one process, is what"+
		" limits the rate. Before each workload every server gets a short warm-up at c=16.\n\n", cfg.runs, cfg.secondaryRuns, sampleEvery)
	p("Load per point: `ab -k -l -r -q -s 300 -c C -t T -n 1000000 -T TYPE -p FILE -e CSV URL` with T = ")
	var durs []string
	for _, w := range cfg.workloads() {
		var ds []string
		for _, c := range w.Conc {
			ds = append(ds, fmt.Sprintf("c=%d: %v", c, w.Duration(c).Round(100*time.Millisecond)))
		}
		durs = append(durs, w.Name+" ("+strings.Join(ds, ", ")+")")
		if cfg.quick {
			break
		}
	}
	if cfg.quick {
		p("a count instead (`-n`), in the smoke run.\n\n")
	} else {
		p("%s, the same for the 1920×1080 JPEG; the digits workloads 2 s at every concurrency"+
			" (`BENCH_SCALE` multiplies them). For resnet18 at c=256 the window holds only one or two turns of a full"+
			" queue (a request waits c / throughput ≈ 6 s or more), so its latencies include the queue filling up.\n\n", durs[0])
	}

	p("**Servers.**\n\n| server | what | set up |\n|---|---|---|\n")
	for _, s := range r.Servers {
		name := s.Name
		if s.Secondary {
			name += " (secondary)"
		}
		p("| %s | %s | %s |\n", name, s.Label, s.Config)
	}
	var un []string
	for _, k := range sortedKeys(r.Unavailable) {
		un = append(un, fmt.Sprintf("**%s**: %s", k, r.Unavailable[k]))
	}
	if len(un) > 0 {
		p("\nNot measured: %s.\n", strings.Join(un, "; "))
	}
	p("\nBatching of torchd, TorchServe and MMS: resnet18 %s (the best of the batch size sweep below), digits and digits_tensor %s."+
		" torchd's workers: %s (the faster of 1 worker with %d intra-op threads and %d workers of 1, in the sweep)."+
		" The Python batching baseline always batches up to 64 requests for up to 1 ms. Every server runs with `OMP_WAIT_POLICY=%s`"+
		" (see the note below the tables).\n\n", r.Batching["resnet18"], r.Batching["digits"], workersText(r.TorchdWorkers), cfg.threads, max(cfg.threads, 2), ompText(cfg.ompWait))

	p("### Targets\n\nMedians, same machine, same run.\n\n| target | wanted | measured | |\n|---|---|---|---|\n")
	for _, t := range r.targets(cfg) {
		meas := t.Measured
		if meas == "" {
			meas = "–"
		}
		p("| %s | %s | %s | %s |\n", t.What, t.Want, meas, passMiss(t))
	}

	p("\n### The in-process ceiling\n\n`torchd bench-model` runs the archive's handler as the daemon does, without HTTP:"+
		" batch after batch (Preprocess of a batch's requests on %d goroutines, one `handlers.Infer` on a locked OS thread with %d intra-op threads,"+
		" Postprocess), and pipelined as the server runs (requests preprocessed without pause while 1 or 2 workers run batches, each with its share"+
		" of the threads); median of rounds. The ceiling is the best of them all, the reference every served figure is divided by.\n\n", m.Cores, cfg.threads)
	p("| workload | input | preprocess, 1 request | postprocess | one request end to end | forward, batch 1 | req/s by batch size, one at a time | ceiling |\n|---|---|---|---|---|---|---|---|\n")
	for _, w := range cfg.workloads() {
		c := r.Ceilings[w.Name]
		if c == nil {
			continue
		}
		var bs []string
		f1 := int64(0)
		for _, x := range c.Batches {
			bs = append(bs, fmt.Sprintf("%d: %s", x.Batch, rps(x.Throughput)))
			if x.Batch == 1 {
				f1 = x.ForwardN
			}
		}
		how := "one at a time"
		if c.Best.Pipelined {
			how = fmt.Sprintf("pipelined: workers %d, threads %d each", c.Best.Workers, c.Best.Threads)
		}
		p("| %s | %d bytes | %s | %s | %s | %s | %s | **%s** (batch %d, %s) |\n", w.Title, c.InputBytes, dur(c.PreprocessN), dur(c.PostprocN),
			dur(c.SingleN), dur(f1), strings.Join(bs, ", "), rps(c.Best.Throughput), c.Best.Batch, how)
	}
	if c := r.Ceilings["resnet18-640"]; c != nil {
		p("\nCommand, e.g.: `%s`\n", c.Cmd)
	}

	for _, w := range cfg.workloads() {
		p("\n### %s\n\n", w.Title)
		p("| c | server | runs | req/s | × ceiling | p50 ms | p90 ms | p99 ms | max ms | errors | mean batch | peak RSS MiB | CPU s / 1k req | client CPU |\n")
		p("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
		conc := slices.Clone(w.Conc)
		for _, c := range conc {
			for _, tool := range []string{"ab", "wrk"} {
				for _, s := range r.Servers {
					sum, ok := r.point(w.Name, c, s.Name, tool)
					if !ok {
						continue
					}
					name := s.Name
					if tool == "wrk" {
						name += " (wrk)"
					}
					if s.Name == "torchd" {
						name = "**" + name + "**"
					}
					frac := "–"
					if ce := r.Ceilings[w.Name]; ce != nil && ce.Best.Throughput > 0 {
						frac = fmt.Sprintf("%.2f", sum.RPS/ce.Best.Throughput)
					}
					mb := "–"
					if sum.MeanBatch > 0 {
						mb = fmt.Sprintf("%.1f", sum.MeanBatch)
					}
					p("| %d | %s | %d | %s | %s | %s | %s | %s | %s | %d | %s | %s | %.2f | %.0f%% |\n", c, name, sum.N, rps(sum.RPS), frac,
						ms(sum.P50), ms(sum.P90), ms(sum.P99), ms(sum.Max), sum.Errors, mb, mib(sum.PeakRSS), sum.CPUPer1k, sum.ClientCPUPct)
				}
			}
		}
		if s, ok := r.point(w.Name, w.Conc[len(w.Conc)-1], "torchd", "ab"); ok {
			p("\nCommand (torchd, c=%d): `%s`\n", w.Conc[len(w.Conc)-1], s.Cmd)
		}
		if s, ok := r.point(w.Name, 32, "torchd", "wrk"); ok {
			p("and `%s`\n", s.Cmd)
		}
	}

	p("\n### Throughput against batch size\n\ntorchd at c=%d with `batch_size` set at registration (`max_batch_delay=%d`), one run each,"+
		" next to the in-process ceiling at the same batch sizes.\n\n| workload | batch size | torchd req/s | mean batch | p99 ms | ceiling req/s |\n|---|---|---|---|---|---|\n", cfg.sweepConc, cfg.delayMS)
	for _, w := range cfg.workloads() {
		sw := r.Sweep[w.Name]
		for _, bsz := range sortedKeys(sw) {
			s, ok := summarize(sw[bsz])
			if !ok {
				continue
			}
			ce := "–"
			if c := r.Ceilings[w.Name]; c != nil {
				for _, x := range c.Batches {
					if x.Batch == bsz {
						ce = rps(x.Throughput)
					}
				}
			}
			p("| %s | %d | %s | %.1f | %s | %s |\n", w.Title, bsz, rps(s.RPS), s.MeanBatch, ms(s.P99), ce)
		}
	}

	for _, name := range sortedKeys(r.WorkerSweep) {
		wr := r.WorkerSweep[name]
		p("\n%s at batch %d, c=%d: %d workers × 1 thread %s req/s (p99 %s ms) against 1 worker × %d threads %s req/s.", name, wr.Batch, cfg.sweepConc,
			wr.Workers, rps(wr.Run.RPS), ms(wr.Run.P99), cfg.threads, rps(wr.OneWorkerRPS))
	}
	if len(r.WorkerSweep) > 0 {
		p("\n")
	}

	p("\n### Plots\n\n")
	rel := func(f string) string {
		if x, err := filepath.Rel(filepath.Dir(cfg.doc), f); err == nil {
			return x
		}
		return f
	}
	p("Response time of every request, sorted (ab's percentiles, the median round), one plot per concurrency:\n\n")
	for _, c := range allConc(cfg) {
		p("![sorted response times, c=%d](%s)\n", c, rel(latencyPlot(cfg, c)))
	}
	p("\nThroughput and p99 against concurrency, torchd against each peer:\n\n")
	for _, w := range cfg.workloads() {
		p("![throughput and p99 against concurrency, %s](%s)\n", w.Name, rel(scalingPlot(cfg, w)))
	}
	p("\nThroughput against batch size:\n\n![throughput against batch size](%s)\n", rel(batchPlot(cfg)))
	if len(r.Errors) > 0 {
		p("\n### Problems during the run\n\n")
		for _, e := range r.Errors {
			p("- %s\n", e)
		}
	}
	p("\nRaw figures of every run: `build/bench/data/results.json` (not committed).\n%s\n", endMarker)
	return b.String()
}

func workersText(w map[string]int) string {
	var parts []string
	for _, m := range sortedKeys(w) {
		parts = append(parts, fmt.Sprintf("%s %d", m, w[m]))
	}
	return strings.Join(parts, ", ")
}

func ompText(v string) string {
	if v == "" {
		return "unset (libgomp's default)"
	}
	return v
}

func ceilingLibTorch(r *results) string {
	for _, c := range r.Ceilings {
		return c.LibTorch
	}
	return "?"
}

func sortedKeys[K int | string, V any](m map[K]V) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func allConc(cfg *config) []int {
	var out []int
	for _, w := range cfg.workloads() {
		for _, c := range w.Conc {
			if !slices.Contains(out, c) {
				out = append(out, c)
			}
		}
	}
	slices.Sort(out)
	return out
}
