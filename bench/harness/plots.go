package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// Plots are drawn by gnuplot (Debian's gnuplot-nox, pngcairo) from data files the harness
// writes under work/plot; the PNGs go next to the markdown.

// serverStyle keeps each server's colour the same in every plot.
var serverStyle = map[string]string{
	"torchd":     `lc rgb "#1f4e9c" lw 3`,
	"torchd-pt2": `lc rgb "#4fa3e0" lw 2`,
	"tornado":    `lc rgb "#e07b00" lw 2`,
	"fastapi":    `lc rgb "#2a9d3a" lw 2`,
	"torchserve": `lc rgb "#c62828" lw 2`,
	"mms":        `lc rgb "#7b3fa0" lw 2`,
}

func latencyPlot(cfg *config, c int) string {
	return filepath.Join(cfg.out, fmt.Sprintf("bench-latency-c%d.png", c))
}

func scalingPlot(cfg *config, w workload) string {
	return filepath.Join(cfg.out, "bench-scaling-"+w.Name+".png")
}

func batchPlot(cfg *config) string { return filepath.Join(cfg.out, "bench-batch.png") }

// plotFiles lists every PNG a run writes.
func plotFiles(cfg *config) []string {
	var out []string
	for _, c := range allConc(cfg) {
		out = append(out, latencyPlot(cfg, c))
	}
	for _, w := range cfg.workloads() {
		out = append(out, scalingPlot(cfg, w))
	}
	return append(out, batchPlot(cfg))
}

func writePlots(cfg *config, r *results) error {
	dir := filepath.Join(cfg.work, "plot")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	write := func(name string, lines []string) (string, error) {
		p := filepath.Join(dir, name)
		return p, os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o644)
	}
	var scripts []string
	head := func(out string, w, h int) string {
		return fmt.Sprintf("set terminal pngcairo noenhanced size %d,%d font \"Sans,10\"\nset output %q\nset grid\nset key below horizontal\n", w, h, out)
	}

	// Sorted response times: one PNG per concurrency, one panel per workload.
	for _, c := range allConc(cfg) {
		var ws []workload
		for _, w := range cfg.workloads() {
			if slices.Contains(w.Conc, c) {
				ws = append(ws, w)
			}
		}
		var g strings.Builder
		g.WriteString(head(latencyPlot(cfg, c), 1100, 750))
		rows, cols := 2, 2
		if len(ws) == 1 {
			rows, cols = 1, 1
		}
		fmt.Fprintf(&g, "set multiplot layout %d,%d title \"Response time per request, sorted, c=%d (median round of ab)\"\n", rows, cols, c)
		g.WriteString("set logscale y\nset xlabel \"requests, sorted (%)\"\nset ylabel \"response time (ms)\"\nset xrange [0:100]\n")
		for _, w := range ws {
			var plots []string
			for _, s := range r.Servers {
				sum, ok := r.point(w.Name, c, s.Name, "ab")
				if !ok || len(sum.Curve) != 101 {
					continue
				}
				var lines []string
				for i, v := range sum.Curve {
					lines = append(lines, fmt.Sprintf("%d %g", i, max(v, 0.01)))
				}
				f, err := write(fmt.Sprintf("latency-%s-c%d-%s.dat", w.Name, c, s.Name), lines)
				if err != nil {
					return err
				}
				plots = append(plots, fmt.Sprintf("%q using 1:2 with lines %s title %q", f, serverStyle[s.Name], s.Name))
			}
			fmt.Fprintf(&g, "set title %q\n", w.Title)
			if len(plots) == 0 {
				g.WriteString("set label 1 \"no data\" at graph 0.5,0.5 center\nplot [0:100] [1:10] NaN notitle\nunset label 1\n")
				continue
			}
			fmt.Fprintf(&g, "plot %s\n", strings.Join(plots, ", \\\n  "))
		}
		g.WriteString("unset multiplot\n")
		scripts = append(scripts, g.String())
	}

	// Throughput and p99 against concurrency, one PNG per workload.
	for _, w := range cfg.workloads() {
		var g strings.Builder
		g.WriteString(head(scalingPlot(cfg, w), 1100, 450))
		fmt.Fprintf(&g, "set multiplot layout 1,2 title %q\n", w.Title+": torchd and its peers against concurrency (medians, ab)")
		g.WriteString("set logscale x 2\nset xlabel \"concurrency (ab -c)\"\n")
		var tp, lp []string
		for _, s := range r.Servers {
			var lines []string
			for _, c := range w.Conc {
				if sum, ok := r.point(w.Name, c, s.Name, "ab"); ok {
					lines = append(lines, fmt.Sprintf("%d %g %g", c, sum.RPS, max(sum.P99, 0.01)))
				}
			}
			if len(lines) == 0 {
				continue
			}
			f, err := write(fmt.Sprintf("scaling-%s-%s.dat", w.Name, s.Name), lines)
			if err != nil {
				return err
			}
			tp = append(tp, fmt.Sprintf("%q using 1:2 with linespoints %s pt 7 title %q", f, serverStyle[s.Name], s.Name))
			lp = append(lp, fmt.Sprintf("%q using 1:3 with linespoints %s pt 7 title %q", f, serverStyle[s.Name], s.Name))
		}
		if c := r.Ceilings[w.Name]; c != nil {
			tp = append(tp, fmt.Sprintf("%g with lines dt 2 lc rgb \"#555555\" lw 2 title \"in-process ceiling\"", c.Best.Throughput))
		}
		if len(tp) == 0 {
			tp, lp = []string{"NaN notitle"}, []string{"NaN notitle"}
		}
		g.WriteString("set ylabel \"requests/s\"\nset yrange [0:*]\nset title \"throughput\"\n")
		fmt.Fprintf(&g, "plot [%d:%d] %s\n", w.Conc[0], w.Conc[len(w.Conc)-1], strings.Join(tp, ", \\\n  "))
		g.WriteString("set ylabel \"p99 (ms)\"\nset yrange [*:*]\nset logscale y\nset title \"p99 latency\"\n")
		fmt.Fprintf(&g, "plot [%d:%d] %s\n", w.Conc[0], w.Conc[len(w.Conc)-1], strings.Join(lp, ", \\\n  "))
		g.WriteString("unset multiplot\n")
		scripts = append(scripts, g.String())
	}

	// Throughput against batch size: torchd's sweep and the ceiling.
	var g strings.Builder
	g.WriteString(head(batchPlot(cfg), 1100, 450))
	g.WriteString("set multiplot layout 1,2 title \"Throughput against batch size\"\nset logscale x 2\nset xlabel \"batch size\"\nset ylabel \"requests/s\"\nset yrange [0:*]\n")
	for _, name := range []string{"resnet18-640", "digits-png"} {
		var w workload
		for _, x := range cfg.workloads() {
			if x.Name == name {
				w = x
			}
		}
		var plots []string
		if c := r.Ceilings[name]; c != nil {
			var lines []string
			for _, b := range c.Batches {
				lines = append(lines, fmt.Sprintf("%d %g", b.Batch, b.Throughput))
			}
			f, err := write("batch-ceiling-"+name+".dat", lines)
			if err != nil {
				return err
			}
			plots = append(plots, fmt.Sprintf("%q using 1:2 with linespoints dt 2 lc rgb \"#555555\" lw 2 pt 6 title \"in-process ceiling\"", f))
		}
		var lines []string
		for _, b := range sortedKeys(r.Sweep[name]) {
			if s, ok := summarize(r.Sweep[name][b]); ok {
				lines = append(lines, fmt.Sprintf("%d %g", b, s.RPS))
			}
		}
		if len(lines) > 0 {
			f, err := write("batch-torchd-"+name+".dat", lines)
			if err != nil {
				return err
			}
			plots = append(plots, fmt.Sprintf("%q using 1:2 with linespoints %s pt 7 title \"torchd, c=%d\"", f, serverStyle["torchd"], cfg.sweepConc))
		}
		if len(plots) == 0 {
			plots = []string{"NaN notitle"}
		}
		fmt.Fprintf(&g, "set title %q\nplot %s\n", w.Title, strings.Join(plots, ", \\\n  "))
	}
	g.WriteString("unset multiplot\n")
	scripts = append(scripts, g.String())

	for i, s := range scripts {
		p := filepath.Join(dir, fmt.Sprintf("plot%02d.gp", i))
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			return err
		}
		if out, err := exec.Command("gnuplot", p).CombinedOutput(); err != nil {
			return fmt.Errorf("gnuplot %s: %v: %s", p, err, lastLines(string(out), 4))
		}
	}
	return nil
}
