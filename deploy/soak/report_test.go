package soak_test

import (
	"encoding/csv"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// The soak test's samples, its verdict on them, and its report (CSV and plot).

// scrapeSoak reads the server's metrics and /proc/<pid>/status, and returns the cumulative
// answers by status class (2xx, 4xx, others) over every model.
func scrapeSoak(c *http.Client, metricsURL string, pid int, targets []*soakTarget) (soakSample, [3]float64, error) {
	var sm soakSample
	var totals [3]float64
	resp, err := c.Get(metricsURL + "/metrics")
	if err != nil {
		return sm, totals, err
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return sm, totals, fmt.Errorf("metrics do not parse: %w", err)
	}
	gauge := func(name string) (float64, error) {
		f, ok := fams[name]
		if !ok || len(f.GetMetric()) == 0 {
			return 0, fmt.Errorf("no metric %s", name)
		}
		m := f.GetMetric()[0]
		if g := m.GetGauge(); g != nil {
			return g.GetValue(), nil
		}
		return m.GetUntyped().GetValue(), nil
	}
	if sm.rss, err = gauge("process_resident_memory_bytes"); err != nil {
		return sm, totals, err
	}
	if sm.goroutines, err = gauge("go_goroutines"); err != nil {
		return sm, totals, err
	}
	if sm.threads, err = gauge("process_num_threads"); err != nil {
		return sm, totals, err
	}
	// The daemon's exposition has no process_open_fds (VictoriaMetrics writes it from
	// WriteFDMetrics, which the daemon does not call), so without it fds are counted here.
	if sm.fds, err = gauge("process_open_fds"); err != nil {
		if sm.fds, err = soakOpenFDs(pid); err != nil {
			return sm, totals, err
		}
	}
	for _, tg := range targets {
		depth := -1.0
		for _, m := range fams["torchd_queue_depth"].GetMetric() {
			if labelsMatch(m, map[string]string{"model": tg.model}) {
				depth = m.GetGauge().GetValue()
			}
		}
		if depth < 0 {
			return sm, totals, fmt.Errorf("no torchd_queue_depth for %s", tg.model)
		}
		sm.queue = append(sm.queue, depth)
	}
	for _, m := range fams["torchd_requests_total"].GetMetric() {
		code := 0
		for _, l := range m.GetLabel() {
			if l.GetName() == "code" {
				code, _ = strconv.Atoi(l.GetValue())
			}
		}
		totals[soakStatusClass(code)] += soakCounter(m)
	}
	sm.vmRSS, err = soakVmRSS(pid)
	return sm, totals, err
}

// soakStatusClass indexes 2xx, 4xx and everything else.
func soakStatusClass(code int) int {
	switch code / 100 {
	case 2:
		return 0
	case 4:
		return 1
	}
	return 2
}

func soakCounter(m *dto.Metric) float64 {
	if c := m.GetCounter(); c != nil {
		return c.GetValue()
	}
	return m.GetUntyped().GetValue()
}

// soakOpenFDs counts the entries of /proc/<pid>/fd.
func soakOpenFDs(pid int) (float64, error) {
	entries, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return float64(len(entries)), err
}

// soakVmRSS reads the resident set size from /proc/<pid>/status, as a check on the metric.
func soakVmRSS(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// soakThirds returns the medians of the middle and the last third of xs; the first third is
// warm-up (allocator pools, worker threads, connection pools filling).
func soakThirds(xs []float64) (middle, last float64) {
	n := len(xs) / 3
	return soakMedian(xs[n : len(xs)-n]), soakMedian(xs[len(xs)-n:])
}

func soakMedian(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func soakColumn(samples []soakSample, f func(soakSample) float64) []float64 {
	out := make([]float64, len(samples))
	for i, s := range samples {
		out[i] = f(s)
	}
	return out
}

// soakVerdict returns what grew without bound, or misbehaved, over the samples; nothing
// when the run was healthy.
func soakVerdict(samples []soakSample, targets []*soakTarget) []string {
	var problems []string
	if len(samples) < 3 {
		return []string{fmt.Sprintf("%d samples: too few to judge growth", len(samples))}
	}
	mid, last := soakThirds(soakColumn(samples, func(s soakSample) float64 { return s.rss }))
	if grew := last - mid; grew > soakRSSGrowthFrac*mid && grew > soakRSSGrowthMiB<<20 {
		problems = append(problems, fmt.Sprintf("RSS grew from %.1f to %.1f MiB (median of the middle third to the last), more than %.0f%% and %d MiB",
			mid/(1<<20), last/(1<<20), soakRSSGrowthFrac*100, soakRSSGrowthMiB))
	}
	mid, last = soakThirds(soakColumn(samples, func(s soakSample) float64 { return s.goroutines }))
	if last-mid > soakGoroutineGrowth {
		problems = append(problems, fmt.Sprintf("goroutines grew from %.0f to %.0f, more than %d", mid, last, soakGoroutineGrowth))
	}
	mid, last = soakThirds(soakColumn(samples, func(s soakSample) float64 { return s.threads }))
	if last-mid > soakGoroutineGrowth {
		problems = append(problems, fmt.Sprintf("OS threads grew from %.0f to %.0f, more than %d", mid, last, soakGoroutineGrowth))
	}
	mid, last = soakThirds(soakColumn(samples, func(s soakSample) float64 { return s.fds }))
	if last-mid > soakFDGrowth {
		problems = append(problems, fmt.Sprintf("open fds grew from %.0f to %.0f, more than %d", mid, last, soakFDGrowth))
	}
	n := len(samples) / 3
	for i, tg := range targets {
		full := true
		for _, s := range samples[len(samples)-n:] {
			full = full && s.queue[i] >= soakQueueSize
		}
		if full {
			problems = append(problems, fmt.Sprintf("%s's queue stayed at its capacity %d through the last third", tg.model, soakQueueSize))
		}
		// Each client has at most one request in flight, so more queued than clients is a
		// count that leaks.
		if peak := slices.Max(soakColumn(samples, func(s soakSample) float64 { return s.queue[i] })); peak > soakClients {
			problems = append(problems, fmt.Sprintf("%s's queue depth reached %.0f with %d clients", tg.model, peak, soakClients))
		}
	}
	for _, s := range samples {
		if s.other > 0 {
			problems = append(problems, fmt.Sprintf("%.0f answers neither 2xx nor 4xx in the interval before %v", s.other, s.at))
		}
		if math.Abs(s.rss-s.vmRSS) > 0.1*s.vmRSS {
			problems = append(problems, fmt.Sprintf("at %v the RSS metric (%.1f MiB) and /proc VmRSS (%.1f MiB) disagree by more than 10%%", s.at, s.rss/(1<<20), s.vmRSS/(1<<20)))
		}
	}
	return problems
}

// summarizeSoak logs the figures docs/guide/reliability.md records: the medians of each third,
// and the RSS trend after warm-up as a least-squares slope.
func summarizeSoak(t *testing.T, samples []soakSample) {
	if len(samples) < 3 {
		return
	}
	n := len(samples) / 3
	row := func(name string, scale float64, f func(soakSample) float64) {
		xs := soakColumn(samples, f)
		for i := range xs {
			xs[i] /= scale
		}
		t.Logf("%-16s median of thirds: %9.1f %9.1f %9.1f   min %9.1f max %9.1f",
			name, soakMedian(xs[:n]), soakMedian(xs[n:len(xs)-n]), soakMedian(xs[len(xs)-n:]), slices.Min(xs), slices.Max(xs))
	}
	row("RSS MiB", 1<<20, func(s soakSample) float64 { return s.rss })
	row("VmRSS MiB", 1<<20, func(s soakSample) float64 { return s.vmRSS })
	row("goroutines", 1, func(s soakSample) float64 { return s.goroutines })
	row("OS threads", 1, func(s soakSample) float64 { return s.threads })
	row("open fds", 1, func(s soakSample) float64 { return s.fds })
	row("good req/s", 1, func(s soakSample) float64 { return s.rps })
	row("p50 ms", 1e-3, func(s soakSample) float64 { return s.p50.Seconds() })
	row("p99 ms", 1e-3, func(s soakSample) float64 { return s.p99.Seconds() })
	var ok, bad, other float64
	for _, s := range samples {
		ok, bad, other = ok+s.ok, bad+s.client, other+s.other
	}
	t.Logf("server answers: %.0f 2xx, %.0f 4xx, %.0f other", ok, bad, other)

	post := samples[n:]
	var sx, sy, sxx, sxy float64
	for _, s := range post {
		x, y := s.at.Hours(), s.rss/(1<<20)
		sx, sy, sxx, sxy = sx+x, sy+y, sxx+x*x, sxy+x*y
	}
	k := float64(len(post))
	if d := k*sxx - sx*sx; d > 0 {
		t.Logf("RSS trend after warm-up: %+.1f MiB/h (least squares over %d samples; a trend, not a bound)", (k*sxy-sx*sy)/d, len(post))
	}
}

func writeSoakCSV(path string, targets []*soakTarget, samples []soakSample) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	head := []string{"t_s", "rss_mib", "vmrss_mib", "goroutines", "open_fds", "os_threads"}
	for _, tg := range targets {
		head = append(head, "queue_"+tg.model)
	}
	w.Write(append(head, "answered_2xx", "answered_4xx", "answered_other", "good_rps", "p50_ms", "p99_ms"))
	num := func(v float64, prec int) string { return strconv.FormatFloat(v, 'f', prec, 64) }
	for _, s := range samples {
		row := []string{num(s.at.Seconds(), 0), num(s.rss/(1<<20), 1), num(s.vmRSS/(1<<20), 1), num(s.goroutines, 0), num(s.fds, 0), num(s.threads, 0)}
		for _, q := range s.queue {
			row = append(row, num(q, 0))
		}
		w.Write(append(row, num(s.ok, 0), num(s.client, 0), num(s.other, 0), num(s.rps, 1),
			num(s.p50.Seconds()*1e3, 2), num(s.p99.Seconds()*1e3, 2)))
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// plotSoak draws RSS, goroutines, open fds and throughput over time, four small panels.
func plotSoak(csvPath, png, title string) error {
	if err := os.MkdirAll(filepath.Dir(png), 0o755); err != nil {
		return err
	}
	panel := func(col, ylabel string) string {
		return fmt.Sprintf("set ylabel %q\nplot %q using \"t_s\":%q with linespoints pt 7 ps 0.5 lw 2 notitle\n", ylabel, csvPath, col)
	}
	script := fmt.Sprintf(`set terminal pngcairo size 900,560 font ",9"
set output %q
set datafile separator ","
set datafile columnheaders
set termoption noenhanced
set grid
set xlabel "seconds"
set xrange [0:*]
set yrange [0:*]
set offsets 0, 0, graph 0.1, 0
set multiplot layout 2,2 title %q
`, png, title) +
		panel("rss_mib", "RSS (MiB)") + panel("goroutines", "goroutines") + panel("open_fds", "open fds") +
		panel("good_rps", "good requests/s") + "unset multiplot\n"
	cmd := exec.Command("gnuplot")
	cmd.Stdin = strings.NewReader(script)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("gnuplot: %v\n%s", err, out)
	}
	return nil
}
