// Command autobatch compares torchd's self-tuning batching (batch_size and max_batch_delay
// "auto") with a sweep of fixed settings, model by model and concurrency by concurrency, in
// one run on one server (issue 9):
//
//	make bench-auto                      # or: go run ./bench/autobatch -rounds 3
//
// Every variant is the same archive registered under its own name, so all of them are loaded
// side by side in one torchd and take turns: at each concurrency, each round runs every
// variant once with `ab -k` for the same time, in an order that rotates every round. The
// figure of a variant is its median requests/s over the rounds. It writes docs/autobatch.md.
package main

import (
	"bufio"
	"flag"
	"fmt"
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
)

type model struct {
	name, archive, file, ctype string
	batches                    []int
}

type variant struct {
	model *model
	name  string // registered model name
	label string // "auto" or "batch 16, delay 0 ms"
	query string
	auto  bool
}

var rps = regexp.MustCompile(`Requests per second:\s+([\d.]+)`)

func main() {
	bin := flag.String("torchd", "bin/torchd", "the torchd binary")
	store := flag.String("store", "model-store", "the model store")
	seconds := flag.Float64("seconds", 4, "seconds of load per point")
	rounds := flag.Int("rounds", 3, "rounds per concurrency")
	concs := flag.String("c", "1,8,16,64", "concurrencies")
	out := flag.String("out", "docs/autobatch.md", "the report")
	flag.Parse()

	models := []*model{
		{name: "digits_tensor", archive: "digits_tensor.mar", file: "models/out/digits/sample_tensor.npy", ctype: "application/x-npy", batches: []int{1, 8, 32}},
		{name: "resnet18", archive: "resnet18.mar", file: "models/out/resnet18/sample_640x480.jpg", ctype: "image/jpeg", batches: []int{1, 4, 16}},
	}
	var cs []int
	for _, f := range strings.Split(*concs, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			fatal("bad -c: %v", err)
		}
		cs = append(cs, n)
	}

	inf, mgmt := "127.0.0.1:18580", "127.0.0.1:18581"
	cache, _ := os.MkdirTemp("", "autobatch-cache-")
	defer os.RemoveAll(cache)
	cmd := exec.Command(*bin, "serve", "--model-store", *store, "--inference-address", inf, "--management-address", mgmt,
		"--metrics-address", "127.0.0.1:18582", "--access-log=false", "--enable-snapshots=false", "--job-queue-size", "1024")
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
		for _, b := range m.batches {
			for _, d := range []int{0, 5} {
				if b == 1 && d > 0 {
					continue
				}
				variants = append(variants, &variant{model: m, name: fmt.Sprintf("%s_b%d_d%d", m.name, b, d),
					label: fmt.Sprintf("batch %d, delay %d ms", b, d), query: fmt.Sprintf("batch_size=%d&max_batch_delay=%d", b, d)})
			}
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

	// results[model][conc][label] = per-round req/s
	results := map[string]map[int]map[string][]float64{}
	for _, m := range models {
		results[m.name] = map[int]map[string][]float64{}
		for _, c := range cs {
			results[m.name][c] = map[string][]float64{}
			var vs []*variant
			for _, v := range variants {
				if v.model == m {
					vs = append(vs, v)
				}
			}
			for round := range *rounds {
				for i := range vs {
					v := vs[(i+round)%len(vs)]
					x := ab(inf, v, c, *seconds)
					results[m.name][c][v.label] = append(results[m.name][c][v.label], x)
					fmt.Printf("%s c=%d round %d %-22s %8.1f req/s\n", m.name, c, round+1, v.label, x)
				}
			}
		}
	}
	var curves strings.Builder
	for _, m := range models {
		r, err := http.Get(fmt.Sprintf("http://%s/models/%s_auto", mgmt, m.name))
		if err == nil {
			sc := bufio.NewScanner(r.Body)
			sc.Buffer(make([]byte, 1<<20), 1<<20)
			var b strings.Builder
			for sc.Scan() {
				b.WriteString(sc.Text() + "\n")
			}
			r.Body.Close()
			fmt.Fprintf(&curves, "<details><summary>describe %s_auto after the run</summary>\n\n```json\n%s```\n</details>\n\n", m.name, b.String())
		}
	}
	write(*out, models, cs, results, *rounds, *seconds, time.Since(start), curves.String())
}

func ab(inf string, v *variant, c int, seconds float64) float64 {
	out, err := exec.Command("ab", "-k", "-q", "-c", strconv.Itoa(c), "-t", fmt.Sprint(seconds), "-n", "10000000",
		"-T", v.model.ctype, "-p", v.model.file, fmt.Sprintf("http://%s/predictions/%s", inf, v.name)).CombinedOutput()
	m := rps.FindSubmatch(out)
	if err != nil || m == nil {
		fatal("ab %s c=%d: %v\n%s", v.name, c, err, out)
	}
	x, _ := strconv.ParseFloat(string(m[1]), 64)
	return x
}

func median(x []float64) float64 {
	s := slices.Clone(x)
	sort.Float64s(s)
	return s[len(s)/2]
}

func write(path string, models []*model, cs []int, res map[string]map[int]map[string][]float64, rounds int, seconds float64, took time.Duration, curves string) {
	var b strings.Builder
	host, _ := os.Hostname()
	fmt.Fprintf(&b, "# Self-tuning batching against a sweep of fixed settings (issue 9)\n\n")
	fmt.Fprintf(&b, "Generated by `make bench-auto` (`go run ./bench/autobatch -rounds %d -seconds %g`) on %s, %s, in %v.\n",
		rounds, seconds, host, time.Now().UTC().Format("2006-01-02 15:04 MST"), took.Round(time.Second))
	fmt.Fprintf(&b, "One torchd serves every variant of a model side by side (the same archive under several names, one worker each,\n")
	fmt.Fprintf(&b, "intra-op threads = cores); at each concurrency each round runs every variant once with `ab -k -t %g`, in a rotating order.\n", seconds)
	fmt.Fprintf(&b, "Figures are medians of the rounds' requests/s. Target: auto ≥ 0.95 × the best fixed setting at every concurrency.\n\n")
	for _, m := range models {
		fmt.Fprintf(&b, "## %s (%s)\n\n| c | auto req/s | best fixed | its req/s | auto / best | |\n|---|---|---|---|---|---|\n", m.name, m.ctype)
		for _, c := range cs {
			auto := median(res[m.name][c]["auto"])
			bestL, best := "", 0.0
			for l, xs := range res[m.name][c] {
				if l == "auto" {
					continue
				}
				if x := median(xs); x > best {
					best, bestL = x, l
				}
			}
			verdict := "pass"
			if auto < 0.95*best {
				verdict = "miss"
			}
			fmt.Fprintf(&b, "| %d | %.1f | %s | %.1f | %.2f | %s |\n", c, auto, bestL, best, auto/best, verdict)
		}
		fmt.Fprintf(&b, "\nEvery variant (median req/s):\n\n| c |")
		var labels []string
		for l := range res[m.name][cs[0]] {
			labels = append(labels, l)
		}
		sort.Strings(labels)
		for _, l := range labels {
			fmt.Fprintf(&b, " %s |", l)
		}
		fmt.Fprintf(&b, "\n|---|%s\n", strings.Repeat("---|", len(labels)))
		for _, c := range cs {
			fmt.Fprintf(&b, "| %d |", c)
			for _, l := range labels {
				fmt.Fprintf(&b, " %.1f |", median(res[m.name][c][l]))
			}
			b.WriteString("\n")
		}
		b.WriteString("\n")
	}
	b.WriteString(curves)
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		fatal("%v", err)
	}
	fmt.Printf("wrote %s\n", path)
}

func fatal(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "autobatch: "+format+"\n", args...)
	os.Exit(1)
}
