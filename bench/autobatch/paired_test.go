package main

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestGeoMean(t *testing.T) {
	g, se := geoMean([]float64{0.5, 2})
	if math.Abs(g-1) > 1e-12 {
		t.Errorf("geomean of 0.5 and 2 = %v, want 1", g)
	}
	// logs ±ln 2: sample sd ln2·√2, se = sd/√2 = ln 2.
	if math.Abs(se-math.Ln2) > 1e-12 {
		t.Errorf("se = %v, want ln 2", se)
	}
	if _, se := geoMean([]float64{1.1}); se != 0 {
		t.Errorf("one ratio: se = %v, want 0", se)
	}
}

func TestPairedVerdict(t *testing.T) {
	for _, c := range []struct {
		g, se float64
		want  string
	}{
		{0.96, 0.05, "pass"},
		{0.95, 0, "pass"},
		{0.90, 0.01, "miss"},      // ln(0.95/0.90) = 0.054 > 0.02
		{0.90, 0.03, "not shown"}, // 0.054 < 0.06
	} {
		if got := pairedVerdict(c.g, c.se, 0.95); got != c.want {
			t.Errorf("pairedVerdict(%v, %v) = %q, want %q", c.g, c.se, got, c.want)
		}
	}
}

func TestWritePaired(t *testing.T) {
	m := &model{name: "digits_tensor", seconds: 4}
	res := map[int][]*comparison{
		64: {
			{a: "auto", b: "batch 32, delay 0 ms, 1 thread", ratios: []float64{0.9, 1.0, 1.1}, steal: []float64{0, 0.06, 0},
				setting: "batch 32, delay 0 ms, 1 thread", probes: 3},
			{a: "batch 32, delay 0 ms (copy)", b: "batch 32, delay 0 ms", ratios: []float64{1, 1, 1}, steal: []float64{0, 0, 0}},
		},
		8: {{a: "auto", b: "batch 8, delay 0 ms", ratios: []float64{1.2}, steal: []float64{0}, probes: -1}},
	}
	var b strings.Builder
	writePaired(&b, m, res, 3)
	out := b.String()
	i8, i64 := strings.Index(out, "\n| 8 |"), strings.Index(out, "\n| 64 |")
	if i8 < 0 || i64 < 0 || i8 > i64 {
		t.Fatalf("rows missing or out of order:\n%s", out)
	}
	for _, want := range []string{
		"| 8 | batch 8, delay 0 ms | – | 1.200 ×/÷ 1.000 | 1.20 (1.20–1.20) | pass | – | – | 0 |",
		"| 64 | batch 32, delay 0 ms, 1 thread | batch 32, delay 0 ms, 1 thread (3) | 0.997 ×/÷ 1.060 | 1.00 (0.90–1.10) | pass | 1.000 ×/÷ 1.000 | 1.00 (1.00–1.00) | 1 |",
		"2-s slices",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	b.Reset()
	writePaired(&b, m, nil, 3)
	if b.Len() != 0 {
		t.Errorf("no results: wrote %q", b.String())
	}
}

func TestWritePairedTarget(t *testing.T) {
	m := &model{name: "digits_tensor", seconds: 4, target: 15 * time.Millisecond}
	tl := targetLabel(m)
	res := map[int][]*comparison{
		16: {
			{a: "auto", b: "batch 8, delay 0 ms, 1 thread", ratios: []float64{1}, steal: []float64{0}},
			{a: tl, b: "batch 8, delay 0 ms, 1 thread", ratios: []float64{0.9, 1.0, 1.1}, steal: []float64{0, 0, 0}, aP99: []float64{3, 4, 20}},
		},
		64: {
			{a: "auto", b: "batch 32, delay 5 ms, 1 thread", ratios: []float64{1}, steal: []float64{0}},
			{a: tl, b: "batch 32, delay 5 ms, 1 thread", ratios: []float64{1, 1, 1}, steal: []float64{0, 0, 0}, aP99: []float64{12, 16, 18}},
		},
		256: {{a: "auto", b: "batch 32, delay 0 ms", ratios: []float64{1}, steal: []float64{0}}},
	}
	var b strings.Builder
	writePaired(&b, m, res, 3)
	out := b.String()
	for _, want := range []string{
		"| 16 | batch 8, delay 0 ms, 1 thread | 0.997 ×/÷ 1.060 | 1.00 (0.90–1.10) | pass | 4 (20) |",
		"| 64 | batch 32, delay 5 ms, 1 thread | 1.000 ×/÷ 1.000 | 1.00 (1.00–1.00) | miss (p99) | 16 (18) |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	if strings.Contains(out, "\n| 256 | batch 32, delay 0 ms | 1.000") {
		t.Errorf("a row for c=256, which has no target comparison:\n%s", out)
	}
	// Without any target comparison there is no target table.
	b.Reset()
	writePaired(&b, m, map[int][]*comparison{8: {res[256][0]}}, 3)
	if strings.Contains(b.String(), tl) {
		t.Errorf("target table without target comparisons:\n%s", b.String())
	}
}

func TestBestFixed(t *testing.T) {
	m := &model{name: "digits_tensor", target: 15 * time.Millisecond}
	r := map[string][]point{
		"auto":                          {{rps: 900, p99: 1}},
		targetLabel(m):                  {{rps: 800, p99: 1}},
		"batch 32, delay 0 ms (copy)":   {{rps: 700, p99: 1}},
		"batch 32, delay 0 ms":          {{rps: 500, p99: 20}, {rps: 600, p99: 30}, {rps: 550, p99: 25}},
		"batch 8, delay 0 ms, 1 thread": {{rps: 400, p99: 10}},
		"batch 8, delay 5 ms, 1 thread": {{rps: 300, p99: 5}},
	}
	if best, in := bestFixed(m, r); best != "batch 32, delay 0 ms" || in != "batch 8, delay 0 ms, 1 thread" {
		t.Errorf("bestFixed = %q, %q; want batch 32 (the highest swept median) and batch 8 without a delay (the highest within 15 ms)", best, in)
	}
	delete(r, "batch 8, delay 0 ms, 1 thread")
	delete(r, "batch 8, delay 5 ms, 1 thread")
	if _, in := bestFixed(m, r); in != "" {
		t.Errorf("no setting within the target: got %q", in)
	}
}
