package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
)

// The paired phase (-pairs N). The rounds' medians carry the machine's slow drifts: on this
// VM one of two identical registrations runs 0.8–0.9 times the other for minutes at a time
// and the sign changes over a run (docs/benchmarks.md, issue 9, session 16), so seven
// rounds cannot tell 0.95 from 1.0. After the rounds at a concurrency, the paired phase
// alternates auto with the rounds' best fixed setting N times, in slices of half a point's
// seconds, each pair in a random order; every pair gives one ratio, measured within a few
// seconds, and drifts slower than that cancel out of it. The copy against its original is
// paired the same way, interleaved, as the control: its ratios are what identical settings
// give, the method's own noise. The best fixed setting is chosen on the rounds and measured
// again here, so the figure has no winner's curse.

// comparison is one paired comparison at one concurrency: a over b, a ratio per pair.
type comparison struct {
	a, b   string // labels
	ratios []float64
	steal  []float64 // the larger stolen share of the pair's two slices
}

// pairedRun runs the paired phase of model m at concurrency c over vs, the model's
// variants; r holds the rounds' points. It returns auto against the best fixed setting and,
// with a copy registered, the copy against its original.
func pairedRun(inf, metrics string, m *model, c int, vs []*variant, r map[string][]point, pairs int) []*comparison {
	byLabel := map[string]*variant{}
	for _, v := range vs {
		byLabel[v.label] = v
	}
	tl := targetLabel(m)
	bestL, best := "", 0.0
	for l, xs := range r {
		if swept(l, tl) {
			if x := median(xs).rps; x > best {
				bestL, best = l, x
			}
		}
	}
	cmps := []*comparison{{a: "auto", b: bestL}}
	if orig := fixedLabel(m.copyOf[0], m.copyOf[1], 0); byLabel[orig+copySuffix] != nil {
		cmps = append(cmps, &comparison{a: orig + copySuffix, b: orig})
	}
	slice := m.seconds / 2
	rng := rand.New(rand.NewPCG(uint64(c), 1<<32))
	for i := range pairs {
		for _, cmp := range cmps {
			x := map[string]point{}
			order := []string{cmp.a, cmp.b}
			rng.Shuffle(2, func(i, j int) { order[i], order[j] = order[j], order[i] })
			for _, l := range order {
				x[l] = ab(inf, byLabel[l], c, slice)
				drain(metrics, byLabel[l].name)
			}
			ratio := x[cmp.a].rps / x[cmp.b].rps
			cmp.ratios = append(cmp.ratios, ratio)
			cmp.steal = append(cmp.steal, max(x[cmp.a].steal, x[cmp.b].steal))
			fmt.Printf("%s c=%d pair %d %s / %s = %.3f (%.1f / %.1f req/s)\n", m.name, c, i+1, cmp.a, cmp.b, ratio, x[cmp.a].rps, x[cmp.b].rps)
		}
	}
	return cmps
}

// geoMean is the geometric mean of ratios and the standard error of their mean log, both
// as factors: the mean ratio is within ×/÷ exp(2 se) of g at about 95%.
func geoMean(ratios []float64) (g, se float64) {
	n := float64(len(ratios))
	var s, ss float64
	for _, x := range ratios {
		s += math.Log(x)
	}
	mean := s / n
	for _, x := range ratios {
		ss += (math.Log(x) - mean) * (math.Log(x) - mean)
	}
	if n > 1 {
		se = math.Sqrt(ss / (n - 1) / n)
	}
	return math.Exp(mean), se
}

// pairedVerdict judges a ratio's geometric mean g ± se (of the log) against the target:
// "pass" when g reaches it, "miss" when g is under it by more than two standard errors,
// and "not shown" between (under the target, within the noise of the pairs).
func pairedVerdict(g, se, target float64) string {
	switch {
	case g >= target:
		return "pass"
	case math.Log(target)-math.Log(g) > 2*se:
		return "miss"
	}
	return "not shown"
}

// writePaired is the report's section for one model's paired phase.
func writePaired(b *strings.Builder, m *model, res map[int][]*comparison, pairs int) {
	if len(res) == 0 {
		return
	}
	fmt.Fprintf(b, "\nPaired phase: after the rounds at each concurrency, %d pairs of %g-s slices, auto against the rounds' best fixed\n", pairs, m.seconds/2)
	b.WriteString("setting and the copy against its original, interleaved, each pair in a random order. Figures: the geometric mean\n")
	b.WriteString("of the pairs' ratios ×/÷ its standard error (as a factor), the median ratio and the range. Verdict against 0.95:\n")
	b.WriteString("pass when the mean reaches it, miss when it is more than two standard errors under it, otherwise not shown.\n\n")
	b.WriteString("| c | auto over | mean ×/÷ se | median (range) | | copy / original: mean ×/÷ se | median (range) | pairs with > 5% stolen |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|\n")
	cs := make([]int, 0, len(res))
	for c := range res {
		cs = append(cs, c)
	}
	sort.Ints(cs)
	for _, c := range cs {
		cmps := res[c]
		auto := cmps[0]
		g, se := geoMean(auto.ratios)
		ctl, ctlRange := "–", "–"
		if len(cmps) > 1 {
			cg, cse := geoMean(cmps[1].ratios)
			ctl, ctlRange = fmt.Sprintf("%.3f ×/÷ %.3f", cg, math.Exp(cse)), medianRange(cmps[1].ratios)
		}
		stolen := 0
		for _, cmp := range cmps {
			for _, s := range cmp.steal {
				if s > 0.05 {
					stolen++
				}
			}
		}
		fmt.Fprintf(b, "| %d | %s | %.3f ×/÷ %.3f | %s | %s | %s | %s | %d |\n", c, auto.b, g, math.Exp(se), medianRange(auto.ratios),
			pairedVerdict(g, se, 0.95), ctl, ctlRange, stolen)
	}
}

// medianRange is "median (lowest–highest)" of ratios.
func medianRange(ratios []float64) string {
	s := append([]float64{}, ratios...)
	sort.Float64s(s)
	return fmt.Sprintf("%.2f (%.2f–%.2f)", s[len(s)/2], s[0], s[len(s)-1])
}
