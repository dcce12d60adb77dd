package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
)

// The paired phase (-pairs N). The rounds' medians carry the machine's slow drifts: on a
// shared machine one of two identical registrations can run 10–20% behind the other for
// minutes at a time, so a few rounds cannot tell 0.95 from 1.0. After the rounds at a concurrency, the paired phase
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
	aP99   []float64 // a's p99 in each of its slices, ms
	// For auto: its setting after the pairs, and the probes it ran during them (-1: unknown).
	setting string
	probes  int
}

// autoState is an auto variant's setting ("batch 32, delay 0 ms, 1 thread") and its probes
// so far, from describe; ok is false when describe failed.
func autoState(mgmt, name string) (setting string, probes int, ok bool) {
	r, err := http.Get(fmt.Sprintf("http://%s/models/%s", mgmt, name))
	if err != nil {
		return "", 0, false
	}
	defer r.Body.Close()
	var d []struct {
		AutoBatching struct {
			BatchSize int     `json:"batchSize"`
			DelayMS   float64 `json:"maxBatchDelayMs"`
			Threads   int     `json:"threads"`
			Probes    int     `json:"probes"`
		} `json:"autoBatching"`
	}
	if json.NewDecoder(r.Body).Decode(&d) != nil || len(d) == 0 {
		return "", 0, false
	}
	a := d[0].AutoBatching
	return settingLabel(a.BatchSize, a.DelayMS, a.Threads), a.Probes, true
}

// pairedRun runs the paired phase of model m at concurrency c over vs, the model's
// variants; r holds the rounds' points. It returns auto against the best fixed setting,
// with a copy registered the copy against its original, and with a target variant that
// variant against the best fixed setting whose rounds' median p99 met the target (where one
// did).
func pairedRun(inf, mgmt, metrics string, m *model, c int, vs []*variant, r map[string][]point, pairs int) []*comparison {
	byLabel := map[string]*variant{}
	for _, v := range vs {
		byLabel[v.label] = v
	}
	tl := targetLabel(m)
	bestL, inL := bestFixed(m, r)
	cmps := []*comparison{{a: "auto", b: bestL}}
	if orig := fixedLabel(m.copyOf[0], m.copyOf[1], 0); byLabel[orig+copySuffix] != nil {
		cmps = append(cmps, &comparison{a: orig + copySuffix, b: orig})
	}
	if byLabel[tl] != nil && inL != "" {
		cmps = append(cmps, &comparison{a: tl, b: inL})
	}
	_, probes0, ok0 := autoState(mgmt, byLabel["auto"].name)
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
			cmp.aP99 = append(cmp.aP99, x[cmp.a].p99)
			fmt.Printf("%s c=%d pair %d %s / %s = %.3f (%.1f / %.1f req/s)\n", m.name, c, i+1, cmp.a, cmp.b, ratio, x[cmp.a].rps, x[cmp.b].rps)
		}
	}
	cmps[0].probes = -1
	if setting, probes, ok := autoState(mgmt, byLabel["auto"].name); ok {
		cmps[0].setting = setting
		if ok0 {
			cmps[0].probes = probes - probes0
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
	b.WriteString("pass when the mean reaches it, miss when it is more than two standard errors under it, otherwise not shown.\n")
	b.WriteString("Auto's setting is its own after the pairs (describe), with the probes it ran during them: where it equals the\n")
	b.WriteString("fixed setting, the ratio is two registrations of one setting, like the control.\n\n")
	b.WriteString("| c | auto over | auto's setting (probes) | mean ×/÷ se | median (range) | | copy / original: mean ×/÷ se | median (range) | pairs with > 5% stolen |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|\n")
	for _, c := range slices.Sorted(maps.Keys(res)) {
		cmps := res[c]
		auto := cmps[0]
		g, se := geoMean(auto.ratios)
		ctl, ctlRange := "–", "–"
		if cp := find(cmps, func(a string) bool { return strings.HasSuffix(a, copySuffix) }); cp != nil {
			cg, cse := geoMean(cp.ratios)
			ctl, ctlRange = fmt.Sprintf("%.3f ×/÷ %.3f", cg, math.Exp(cse)), medianRange(cp.ratios)
		}
		stolen := 0
		for _, cmp := range cmps {
			for _, s := range cmp.steal {
				if s > 0.05 {
					stolen++
				}
			}
		}
		state := "–"
		if auto.setting != "" {
			state = auto.setting
			if auto.probes >= 0 {
				state += fmt.Sprintf(" (%d)", auto.probes)
			}
		}
		fmt.Fprintf(b, "| %d | %s | %s | %.3f ×/÷ %.3f | %s | %s | %s | %s | %d |\n", c, auto.b, state, g, math.Exp(se), medianRange(auto.ratios),
			pairedVerdict(g, se, 0.95), ctl, ctlRange, stolen)
	}

	writePairedTarget(b, m, res)
}

// find is the comparison whose a label satisfies is, or nil.
func find(cmps []*comparison, is func(a string) bool) *comparison {
	for _, c := range cmps {
		if is(c.a) {
			return c
		}
	}
	return nil
}

// writePairedTarget is the paired phase of the target variant, where it ran: against the
// best fixed setting within the target, judged against 0.90, with its p99 over the slices.
func writePairedTarget(b *strings.Builder, m *model, res map[int][]*comparison) {
	tl := targetLabel(m)
	head := false
	for _, c := range slices.Sorted(maps.Keys(res)) {
		t := find(res[c], func(a string) bool { return a == tl })
		if t == nil {
			continue
		}
		if !head {
			fmt.Fprintf(b, "\n%s, paired the same way against the best fixed setting whose rounds' median p99 met the target\n", tl)
			fmt.Fprintf(b, "(where one did). Verdict against 0.90 as above, and a miss when the median of its slices' p99 is over the target.\n\n")
			b.WriteString("| c | over | mean ×/÷ se | median (range) | | its p99 ms: median (highest) of its slices |\n")
			b.WriteString("|---|---|---|---|---|---|\n")
			head = true
		}
		g, se := geoMean(t.ratios)
		verdict := pairedVerdict(g, se, 0.90)
		p99 := medianOf(t.aP99)
		if p99 > float64(m.target.Milliseconds()) {
			verdict = "miss (p99)"
		}
		fmt.Fprintf(b, "| %d | %s | %.3f ×/÷ %.3f | %s | %s | %.0f (%.0f) |\n", c, t.b, g, math.Exp(se), medianRange(t.ratios), verdict,
			p99, slices.Max(t.aP99))
	}
}

// medianOf is the median of xs (the upper one of an even count).
func medianOf(xs []float64) float64 { s := slices.Sorted(slices.Values(xs)); return s[len(s)/2] }

// medianRange is "median (lowest–highest)" of ratios.
func medianRange(ratios []float64) string {
	s := slices.Sorted(slices.Values(ratios))
	return fmt.Sprintf("%.2f (%.2f–%.2f)", s[len(s)/2], s[0], s[len(s)-1])
}
