// Command harness is `make bench` and `make bench-smoke`: torchd against its in-process
// ceiling and against Python, TorchServe and MMS peers, on this machine, in one run, with ab
// and wrk. It writes the tables into docs/benchmarks.md and the plots next to it (smoke:
// into build/bench-smoke/, checking only that every step works).
//
// Every target is a ratio of medians measured in the same run; the servers run side by side
// and take turns point by point, so drift on a shared machine hits them alike.
//
//	go run ./bench/harness                  the full run (about 20 minutes)
//	BENCH_QUICK=1 go run ./bench/harness    the smoke run (about 30 seconds)
//
// Environment: BENCH_RUNS (3), BENCH_SECONDARY_RUNS (1; FastAPI and MMS), BENCH_PEERS
// (tornado,fastapi,torchserve,mms), BENCH_SCALE (1; multiplies every run's duration),
// BENCH_OUT (docs, or build/bench-smoke).
//
// One file over 600 lines on purpose: the run is one sequence (start the peers, take turns,
// write the tables), and splitting it would scatter that order across files.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// workload is one model and one request body.
type workload struct {
	Name        string // resnet18-640, resnet18-1080, digits-png, digits-tensor
	Title       string
	Model       string // the served model: resnet18, digits, digits_tensor
	Archive     string // torchd's archive in model-store/
	File        string
	ContentType string
	Conc        []int
	// Duration of one run at a concurrency; the Quick count replaces it in smoke runs.
	Duration func(c int) time.Duration
	Quick    int
	// Batches for the in-process ceiling.
	Batches string
}

// config is what one invocation measures.
type config struct {
	quick         bool
	runs          int
	secondaryRuns int
	scale         float64
	peers         []string
	root          string // the repository
	work          string // scratch: logs, ab's CSV files, plot data
	out           string // where the markdown and the PNGs go
	doc           string // the markdown file the section goes into
	torchd        string
	python        string
	threads       int // intra-op threads of torchd's and the Python peers' model worker; workers of TorchServe and MMS
	// ompWait is OMP_WAIT_POLICY for every server and the ceiling ("" leaves libgomp's
	// default). PASSIVE, because on a shared machine a forward whose OpenMP threads spin
	// while another tenant holds a core runs many times slower (docs/design/openmp.md).
	ompWait  string
	coldRuns int
	// The batching torchd, TorchServe and MMS serve with. resnet18's batch size is tuned by
	// the sweep unless BENCH_RESNET_BATCH sets it.
	resnetBatch, digitsBatch, delayMS int
	resnetTuned                       bool
	// torchdWorkers is torchd's workers per model: 1 (with every core as intra-op threads)
	// unless the sweep found 2 workers of one thread each faster.
	torchdWorkers map[string]int
	sweep         map[string][]int // workload → batch sizes
	sweepConc     int
}

func envInt(k string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(k)); err == nil {
		return v
	}
	return def
}

func loadConfig() (*config, error) {
	root, err := os.Getwd()
	if err != nil {
		return nil, err
	}
	c := &config{
		quick: os.Getenv("BENCH_QUICK") == "1", root: root, scale: 1,
		torchd: filepath.Join(root, "bin", "torchd"), python: filepath.Join(root, ".venv", "bin", "python"), threads: runtime.NumCPU(),
		resnetBatch: envInt("BENCH_RESNET_BATCH", 8), digitsBatch: envInt("BENCH_DIGITS_BATCH", 32), delayMS: envInt("BENCH_DELAY_MS", 0),
		resnetTuned:   os.Getenv("BENCH_RESNET_BATCH") == "",
		sweepConc:     64,
		ompWait:       "PASSIVE",
		torchdWorkers: map[string]int{"resnet18": 1, "digits": 1, "digits_tensor": 1},
	}
	if v, ok := os.LookupEnv("BENCH_OMP_WAIT_POLICY"); ok {
		c.ompWait = v
	}
	if s, err := strconv.ParseFloat(os.Getenv("BENCH_SCALE"), 64); err == nil && s > 0 {
		c.scale = s
	}
	if c.quick {
		c.runs, c.secondaryRuns, c.coldRuns = envInt("BENCH_RUNS", 1), envInt("BENCH_SECONDARY_RUNS", 1), 1
		c.peers = []string{"tornado", "fastapi"}
		c.work = filepath.Join(root, "build", "bench-smoke", "data")
		c.out = filepath.Join(root, "build", "bench-smoke")
		c.doc = filepath.Join(c.out, "benchmarks.md")
		c.sweep = map[string][]int{"resnet18-640": {1, 2}, "digits-png": {1, 32}}
		c.sweepConc = 8
	} else {
		c.runs, c.secondaryRuns, c.coldRuns = max(envInt("BENCH_RUNS", 3), 1), max(envInt("BENCH_SECONDARY_RUNS", 1), 1), 3
		c.peers = []string{"torchd-pt2", "tornado", "fastapi", "torchserve", "mms"}
		c.work = filepath.Join(root, "build", "bench", "data")
		c.out = filepath.Join(root, "docs")
		c.doc = filepath.Join(c.out, "benchmarks.md")
		c.sweep = map[string][]int{"resnet18-640": {1, 2, 4, 8, 16, 32}, "digits-png": {1, 4, 16, 32, 64}}
	}
	if v := os.Getenv("BENCH_PEERS"); v != "" {
		c.peers = nil
		for p := range strings.SplitSeq(v, ",") {
			if p = strings.TrimSpace(p); p != "" && p != "none" {
				c.peers = append(c.peers, p)
			}
		}
	}
	if v := os.Getenv("BENCH_OUT"); v != "" {
		c.out, _ = filepath.Abs(v)
		c.doc = filepath.Join(c.out, "benchmarks.md")
	}
	return c, nil
}

// serverEnv is the environment every server and `torchd bench-model` run in.
func (c *config) serverEnv() []string {
	var env []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "OMP_WAIT_POLICY=") {
			env = append(env, e)
		}
	}
	if c.ompWait != "" {
		env = append(env, "OMP_WAIT_POLICY="+c.ompWait)
	}
	return env
}

func (c *config) workloads() []workload {
	sec := func(s float64) time.Duration { return time.Duration(s * c.scale * float64(time.Second)) }
	resnet := func(conc int) time.Duration {
		switch {
		case conc >= 256:
			return sec(12)
		case conc >= 64:
			return sec(6)
		case conc >= 16:
			return sec(3)
		}
		return sec(2.5)
	}
	digits := func(int) time.Duration { return sec(2) }
	ws := []workload{
		{Name: "resnet18-640", Title: "resnet18, 640×480 JPEG", Model: "resnet18", Archive: "model-store/resnet18.mar",
			File: "models/out/resnet18/sample_640x480.jpg", ContentType: "image/jpeg", Conc: []int{1, 8, 16, 64, 256},
			Duration: resnet, Quick: 8, Batches: "1,2,4,8,16"},
		{Name: "resnet18-1080", Title: "resnet18, 1920×1080 JPEG", Model: "resnet18", Archive: "model-store/resnet18.mar",
			File: "models/out/resnet18/sample_1920x1080.jpg", ContentType: "image/jpeg", Conc: []int{1, 8, 16, 64, 256},
			Duration: resnet, Quick: 8, Batches: "1,4,8,16"},
		{Name: "digits-png", Title: "digits, 28×28 PNG", Model: "digits", Archive: "model-store/digits.mar",
			File: "models/out/digits/sample.png", ContentType: "image/png", Conc: []int{1, 8, 16, 32, 64, 256},
			Duration: digits, Quick: 100, Batches: "1,2,4,8,16,32,64"},
		{Name: "digits-tensor", Title: "digits_tensor, .npy float32 [1,28,28]", Model: "digits_tensor", Archive: "model-store/digits_tensor.mar",
			File: "models/out/digits/sample_tensor.npy", ContentType: "application/x-npy", Conc: []int{1, 8, 16, 64, 256},
			Duration: digits, Quick: 100, Batches: "1,2,4,8,16,32,64"},
	}
	if c.quick {
		for i := range ws {
			ws[i].Conc = []int{1, 8}
			ws[i].Batches = "1,2"
		}
	}
	return ws
}

// run is one measured run: the load generator's figures and the server's.
type run struct {
	loadResult
	Round     int
	CPUPer1k  float64 // server CPU seconds per 1,000 completed requests
	PeakRSS   int64   // bytes, the server's process tree
	MeanBatch float64 // torchd only: requests per forward during the run
}

type pointKey struct {
	Workload string
	Conc     int
	Server   string
	Tool     string
}

// results is everything measured, written to results.json and into the docs.
type results struct {
	Started, Finished time.Time
	Machine           machine
	Servers           []serverInfo
	Unavailable       map[string]string // peer → why it was not measured
	Ceilings          map[string]*ceiling
	Probes            map[string][]*ceiling // probeKey → the in-process probes run between rounds
	ColdStart         []float64             // seconds
	ColdStartStored   []float64             // seconds, with resnet18.mar uncompressed
	ColdStartErr      string
	Runs              map[string][]run         // pointKey.String() → runs
	Sweep             map[string]map[int][]run // workload → batch size → runs (torchd)
	Batching          map[string]string        // model → "batch_size=…, max_batch_delay=…"
	TorchdWorkers     map[string]int           // model → torchd's workers
	WorkerSweep       map[string]workerRun     // workload → torchd with 2 workers at the best batch size
	Errors            []string
	StolenSeconds     float64
}

// workerRun is torchd with several single-threaded workers, against one with all threads.
type workerRun struct {
	Batch, Workers int
	Run            run
	OneWorkerRPS   float64
}

type serverInfo struct {
	Name, Label, Config string
	Secondary           bool
	Runs                int
	PeakRSS             int64
}

func probeKey(w string, c int) string { return fmt.Sprintf("%s|%d", w, c) }

func (k pointKey) String() string {
	return fmt.Sprintf("%s|%d|%s|%s", k.Workload, k.Conc, k.Server, k.Tool)
}

type harness struct {
	stolen0 float64 // /proc/stat's steal at the start
	cfg     *config
	res     *results
	servers []*server
	mu      sync.Mutex
}

func main() {
	log.SetFlags(log.Ltime)
	log.SetPrefix("bench: ")
	cfg, err := loadConfig()
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	h := &harness{cfg: cfg, res: &results{
		Unavailable: map[string]string{}, Ceilings: map[string]*ceiling{}, Probes: map[string][]*ceiling{}, Runs: map[string][]run{},
		Sweep: map[string]map[int][]run{}, Batching: map[string]string{}, TorchdWorkers: map[string]int{},
		WorkerSweep: map[string]workerRun{},
	}}
	start := time.Now()
	if os.Getenv("BENCH_REPORT_ONLY") == "1" {
		// Redraw the docs and plots from the last run's results.json, measuring nothing.
		if err := h.reportOnly(); err != nil {
			log.Fatal(err)
		}
		log.Printf("rewrote %s from %s", cfg.doc, filepath.Join(cfg.work, "results.json"))
		return
	}
	err = h.run(ctx)
	for _, s := range h.servers {
		s.stop(20 * time.Second)
	}
	if err != nil {
		log.Fatalf("failed after %v: %v", time.Since(start).Round(time.Second), err)
	}
	log.Printf("done in %v; wrote %s", time.Since(start).Round(time.Second), cfg.doc)
}

func (h *harness) run(ctx context.Context) error {
	cfg := h.cfg
	if err := h.preflight(); err != nil {
		return err
	}
	for _, d := range []string{cfg.work, filepath.Join(cfg.work, "logs"), filepath.Join(cfg.work, "ab"), cfg.out} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	h.res.Started = time.Now()
	h.res.Machine = describeMachine(cfg)
	h.stolen0 = stolenSeconds()

	log.Printf("cold start: %d runs", cfg.coldRuns)
	if err := h.coldStart(ctx); err != nil {
		h.res.ColdStartErr = err.Error()
		h.fail("cold start: %v", err)
	}
	if cfg.quick {
		// The smoke run checks that the steps work, not their figures: the servers start
		// while the ceilings run.
		started := make(chan error, 1)
		go func() { started <- h.startServers(ctx) }()
		errC := h.ceilings(ctx)
		if err := <-started; err != nil {
			return err
		}
		if errC != nil {
			return errC
		}
	} else {
		if err := h.ceilings(ctx); err != nil {
			return err
		}
		if err := h.startServers(ctx); err != nil {
			return err
		}
	}
	if err := h.batchSweep(ctx); err != nil {
		return err
	}
	if err := h.restartTorchd(ctx); err != nil {
		return err
	}
	if err := h.registerAll(); err != nil {
		return err
	}
	if err := h.matrix(ctx); err != nil {
		return err
	}
	return h.finish()
}

// restartTorchd gives the measurements a fresh torchd, so that its peak RSS is that of the
// settings it is measured with, not of the sweep's largest batches (LibTorch's freed buffers
// stay in the C heap). The smoke run keeps the one it has.
func (h *harness) restartTorchd(ctx context.Context) error {
	if h.cfg.quick {
		return nil
	}
	cfg := h.cfg
	log.Print("restarting torchd with the tuned settings")
	h.servers[0].stop(20 * time.Second)
	td, err := newTorchd(cfg)
	if err != nil {
		return err
	}
	h.servers[0] = td
	return td.waitPing(ctx, time.Minute)
}

// finish stops the servers and writes results.json, the docs and the plots.
func (h *harness) finish() error {
	cfg := h.cfg
	for _, s := range h.servers {
		s.stop(20 * time.Second)
	}
	h.res.StolenSeconds = stolenSeconds() - h.stolen0
	h.res.Finished = time.Now()
	for _, s := range h.servers {
		runs := cfg.runs
		if s.Secondary {
			runs = cfg.secondaryRuns
		}
		h.res.Servers = append(h.res.Servers, serverInfo{Name: s.Name, Label: s.Label, Config: s.Config, Secondary: s.Secondary, Runs: runs, PeakRSS: s.peakRSS})
	}
	b, _ := json.MarshalIndent(h.res, "", "  ")
	if err := os.WriteFile(filepath.Join(cfg.work, "results.json"), b, 0o644); err != nil {
		return err
	}
	if err := writeReport(cfg, h.res); err != nil {
		return err
	}
	if cfg.quick {
		return h.checkSmoke()
	}
	return nil
}

func (h *harness) reportOnly() error {
	b, err := os.ReadFile(filepath.Join(h.cfg.work, "results.json"))
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, h.res); err != nil {
		return err
	}
	return writeReport(h.cfg, h.res)
}

func (h *harness) fail(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	log.Print("error: ", msg)
	h.mu.Lock()
	h.res.Errors = append(h.res.Errors, msg)
	h.mu.Unlock()
}

func (h *harness) preflight() error {
	cfg := h.cfg
	var missing []string
	for _, f := range []string{cfg.torchd, "model-store/resnet18.mar", "model-store/digits.mar", "model-store/digits_tensor.mar"} {
		if _, err := os.Stat(f); err != nil {
			missing = append(missing, f)
		}
	}
	for _, w := range cfg.workloads() {
		if _, err := os.Stat(w.File); err != nil {
			missing = append(missing, w.File)
		}
	}
	for _, t := range []string{"ab", "wrk", "gnuplot", cfg.python} {
		if _, err := exec.LookPath(t); err != nil {
			missing = append(missing, t)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing %s (make bench builds them: make lib build models, and apt installs apache2-utils wrk gnuplot-nox)", strings.Join(missing, ", "))
	}
	return nil
}

// coldStart times `torchd serve --models resnet18.mar,digits.mar` from exec to the first
// 200 on /ping, which torchd answers only once both models are loaded and warm. Each round
// also times the same start with resnet18 archived uncompressed (zip-store), which shows
// what decompressing the archive costs.
func (h *harness) coldStart(ctx context.Context) error {
	stored := filepath.Join(h.cfg.work, "store-stored")
	if err := h.storedArchives(stored); err != nil {
		h.fail("zip-store archives for the cold start: %v", err)
		stored = ""
	}
	for i := range h.cfg.coldRuns {
		d, err := h.coldStartOnce(ctx, "model-store")
		if err != nil {
			return err
		}
		log.Printf("cold start %d: %v", i+1, d.Round(time.Millisecond))
		h.res.ColdStart = append(h.res.ColdStart, d.Seconds())
		if stored == "" {
			continue
		}
		if d, err = h.coldStartOnce(ctx, stored); err != nil {
			return err
		}
		log.Printf("cold start %d, uncompressed archive: %v", i+1, d.Round(time.Millisecond))
		h.res.ColdStartStored = append(h.res.ColdStartStored, d.Seconds())
	}
	return nil
}

func (h *harness) coldStartOnce(ctx context.Context, store string) (time.Duration, error) {
	ports, err := freePorts(3)
	if err != nil {
		return 0, err
	}
	s := &server{Name: "torchd-cold", base: fmt.Sprintf("http://127.0.0.1:%d", ports[0]), logPath: filepath.Join(h.cfg.work, "logs", "cold-start.log")}
	t0 := time.Now()
	err = s.start(h.cfg.root, h.cfg.serverEnv(), h.cfg.torchd, "serve", "--access-log=false", "--enable-snapshots=false", "--model-store", store,
		"--models", "resnet18=resnet18.mar,digits=digits.mar",
		"--inference-address", fmt.Sprintf("127.0.0.1:%d", ports[0]),
		"--management-address", fmt.Sprintf("127.0.0.1:%d", ports[1]),
		"--metrics-address", fmt.Sprintf("127.0.0.1:%d", ports[2]), "--grpc-address=", "--grpc-inference-address=", "--grpc-management-address=")
	if err != nil {
		return 0, err
	}
	err = s.waitPingFast(ctx, 60*time.Second)
	d := time.Since(t0)
	s.stop(10 * time.Second)
	return d, err
}

// storedArchives writes resnet18.mar as the Makefile does but uncompressed, next to a copy
// of digits.mar.
func (h *harness) storedArchives(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	cmd := exec.Command(h.cfg.torchd, "archive", "--model-name", "resnet18", "--version", "1.0",
		"--serialized-file", "models/out/resnet18/model.pt", "--config-file", "models/configs/resnet18.toml",
		"--extra-files", "models/out/resnet18/index_to_name.json", "--export-path", dir, "--archive-format", "zip-store", "--force")
	cmd.Dir = h.cfg.root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%v: %s", err, lastLines(string(out), 2))
	}
	b, err := os.ReadFile(filepath.Join(h.cfg.root, "model-store", "digits.mar"))
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "digits.mar"), b, 0o644)
}

// ceilings measures every workload's in-process ceiling before any server starts; the smoke
// run measures them all at once, as it checks only that they work.
func (h *harness) ceilings(ctx context.Context) error {
	ws := h.cfg.workloads()
	out := make([]*ceiling, len(ws))
	errs := make([]error, len(ws))
	var wg sync.WaitGroup
	for i, w := range ws {
		f := func() {
			log.Printf("ceiling: %s (in-process, batches %s)", w.Name, w.Batches)
			if h.cfg.quick {
				out[i], errs[i] = h.ceiling(ctx, w, w.Batches, "1", "20ms")
			} else {
				out[i], errs[i] = h.ceiling(ctx, w, w.Batches, "3", "500ms")
			}
		}
		if h.cfg.quick {
			wg.Add(1)
			go func() { defer wg.Done(); f() }()
		} else {
			f()
		}
	}
	wg.Wait()
	for i, w := range ws {
		if errs[i] != nil {
			return fmt.Errorf("ceiling %s: %w", w.Name, errs[i])
		}
		h.res.Ceilings[w.Name] = out[i]
	}
	return nil
}

// probeBatches says which points of the targets get an in-process ceiling probe in each of
// their rounds, and at which batch sizes: the ceiling the target compares with is then
// measured in the same minutes as the server, not only at the start.
func (h *harness) probeBatches(w workload, c int) string {
	switch {
	case w.Name == "resnet18-640" && c == 64:
		// The best batch size of the ceiling measured at the start, and the one torchd
		// serves with: the probe's ceiling is the better of the two.
		if ce := h.res.Ceilings[w.Name]; ce != nil {
			if ce.Best.Batch == h.cfg.resnetBatch {
				return strconv.Itoa(ce.Best.Batch)
			}
			return fmt.Sprintf("%d,%d", min(ce.Best.Batch, h.cfg.resnetBatch), max(ce.Best.Batch, h.cfg.resnetBatch))
		}
	case (w.Name == "resnet18-640" || w.Name == "digits-tensor") && c == 1:
		return "1"
	}
	return ""
}

func (h *harness) startServers(ctx context.Context) error {
	cfg := h.cfg
	td, err := newTorchd(cfg)
	if err != nil {
		return fmt.Errorf("torchd: %w", err)
	}
	h.servers = append(h.servers, td)
	for _, p := range cfg.peers {
		var s *server
		switch p {
		case "tornado", "fastapi":
			mods := map[string]string{"tornado": "tornado", "fastapi": "fastapi, uvicorn"}[p]
			if out, err := exec.Command(cfg.python, "-c", "import "+mods).CombinedOutput(); err != nil {
				h.res.Unavailable[p] = fmt.Sprintf("%s cannot import %s: %s", cfg.python, mods, lastLines(string(out), 1))
				continue
			}
			s, err = newPythonPeer(cfg, p)
		case "torchd-pt2":
			s, err = newTorchdPT2(cfg)
		case "torchserve", "mms":
			jp := javaPeers[p]
			if why := jp.unavailable(cfg.root); why != "" {
				h.res.Unavailable[p] = why
				continue
			}
			s, err = newJavaPeer(cfg, jp)
		default:
			return fmt.Errorf("unknown peer %q (BENCH_PEERS takes torchd-pt2, tornado, fastapi, torchserve, mms)", p)
		}
		if err != nil {
			h.res.Unavailable[p] = err.Error()
			continue
		}
		h.servers = append(h.servers, s)
	}
	log.Printf("starting %d servers side by side", len(h.servers))
	var wg sync.WaitGroup
	errs := make([]error, len(h.servers))
	for i, s := range h.servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.waitPing(ctx, 3*time.Minute)
		}()
	}
	wg.Wait()
	if errs[0] != nil {
		return errs[0]
	}
	live := h.servers[:1]
	for i, s := range h.servers[1:] {
		if errs[i+1] != nil {
			h.res.Unavailable[s.Name] = errs[i+1].Error()
			s.stop(10 * time.Second)
			continue
		}
		live = append(live, s)
	}
	h.servers = live
	return nil
}

func (h *harness) torchdServer() *server { return h.servers[0] }

// batchSweep measures torchd at one concurrency for several batch sizes: throughput against
// batch size, next to the in-process ceiling's. Unless BENCH_RESNET_BATCH is set, resnet18
// is then served at the batch size that did best.
func (h *harness) batchSweep(ctx context.Context) error {
	cfg := h.cfg
	td := h.torchdServer()
	for _, w := range cfg.workloads() {
		sizes, ok := cfg.sweep[w.Name]
		if !ok {
			continue
		}
		h.res.Sweep[w.Name] = map[int][]run{}
		best, bestRPS := 0, 0.0
		for _, b := range sizes {
			if err := td.register(w.Model, b, cfg.delayMS, 1); err != nil {
				return err
			}
			log.Printf("sweep %s: batch_size=%d, c=%d", w.Name, b, cfg.sweepConc)
			r, err := h.measure(ctx, td, w, cfg.sweepConc, 0, true)
			if err != nil {
				h.fail("sweep %s batch %d: %v", w.Name, b, err)
				continue
			}
			h.res.Sweep[w.Name][b] = append(h.res.Sweep[w.Name][b], r)
			if r.RPS > bestRPS {
				best, bestRPS = b, r.RPS
			}
		}
		if best == 0 {
			continue
		}
		if w.Model == "resnet18" && cfg.resnetTuned {
			cfg.resnetBatch = best
		}
		// The other way to share 2 cores: 2 workers of 1 intra-op thread each.
		workers := max(cfg.threads, 2)
		if err := td.register(w.Model, best, cfg.delayMS, workers); err != nil {
			return err
		}
		log.Printf("sweep %s: batch_size=%d, %d workers, c=%d", w.Name, best, workers, cfg.sweepConc)
		r, err := h.measure(ctx, td, w, cfg.sweepConc, 0, true)
		if err != nil {
			h.fail("sweep %s %d workers: %v", w.Name, workers, err)
			continue
		}
		h.res.WorkerSweep[w.Name] = workerRun{Batch: best, Workers: workers, Run: r, OneWorkerRPS: bestRPS}
		if r.RPS > bestRPS {
			cfg.torchdWorkers[w.Model] = workers
			if w.Model == "digits" {
				cfg.torchdWorkers["digits_tensor"] = workers
			}
		}
	}
	return nil
}

// registerAll registers the three models with the tuned batching on every server that has
// a management API, and checks that every server answers every workload.
func (h *harness) registerAll() error {
	cfg := h.cfg
	batch := map[string]int{"resnet18": cfg.resnetBatch, "digits": cfg.digitsBatch, "digits_tensor": cfg.digitsBatch}
	for _, m := range []string{"resnet18", "digits", "digits_tensor"} {
		h.res.Batching[m] = fmt.Sprintf("batch_size=%d, max_batch_delay=%d ms", batch[m], cfg.delayMS)
		h.res.TorchdWorkers[m] = cfg.torchdWorkers[m]
	}
	// The servers load in parallel: TorchServe and MMS start a Python worker per model.
	errs := make([]error, len(h.servers))
	var wg sync.WaitGroup
	for i, s := range h.servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, m := range []string{"resnet18", "digits", "digits_tensor"} {
				workers := 0
				if s.metrics != "" { // torchd, and torchd serving .pt2 packages
					workers = cfg.torchdWorkers[m]
				}
				if errs[i] = s.register(m, batch[m], cfg.delayMS, workers); errs[i] != nil {
					return
				}
			}
			for _, w := range cfg.workloads() {
				if errs[i] = s.predict(w); errs[i] != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	if errs[0] != nil {
		return errs[0]
	}
	live := h.servers[:1]
	for i, s := range h.servers[1:] {
		if err := errs[i+1]; err != nil {
			h.res.Unavailable[s.Name] = err.Error()
			s.stop(10 * time.Second)
			continue
		}
		live = append(live, s)
	}
	h.servers = live
	return nil
}

// matrix runs every workload at every concurrency on every server: round by round, the
// servers taking turns (in an order that rotates each round), so that the machine's drift
// falls on all of them.
func (h *harness) matrix(ctx context.Context) error {
	cfg := h.cfg
	for _, w := range cfg.workloads() {
		if !cfg.quick {
			// A short warm-up at mixed batch sizes, so that TorchScript's profiling
			// executor has seen them on every server before anything is measured.
			for _, s := range h.servers {
				h.warm(ctx, s, w)
			}
		}
		for _, c := range w.Conc {
			for round := range cfg.runs {
				order := slices.Clone(h.servers)
				k := round % len(order)
				order = append(order[k:], order[:k]...)
				for _, s := range order {
					if s.Secondary && round >= cfg.secondaryRuns {
						continue
					}
					if err := ctx.Err(); err != nil {
						return err
					}
					log.Printf("%s c=%d round %d: %s", w.Name, c, round+1, s.Name)
					r, err := h.measure(ctx, s, w, c, round, true)
					if err != nil {
						h.fail("%s c=%d %s: %v", w.Name, c, s.Name, err)
						continue
					}
					key := pointKey{w.Name, c, s.Name, "ab"}.String()
					h.res.Runs[key] = append(h.res.Runs[key], r)
				}
				if b := h.probeBatches(w, c); b != "" {
					t := "1s"
					if cfg.quick {
						t = "20ms"
					}
					log.Printf("%s c=%d round %d: in-process ceiling probe (batch %s)", w.Name, c, round+1, b)
					ce, err := h.ceiling(ctx, w, b, "1", t)
					if err != nil {
						h.fail("probe %s c=%d: %v", w.Name, c, err)
						continue
					}
					key := probeKey(w.Name, c)
					h.res.Probes[key] = append(h.res.Probes[key], ce)
				}
			}
		}
		// The digits points are fast enough for ab, one process on one core, to be what
		// limits them; wrk measures the 5,000 req/s target's point again, torchd and the
		// batching baseline.
		if w.Name == "digits-png" {
			c := 32
			if cfg.quick {
				c = 8
			}
			for round := range cfg.runs {
				for _, s := range h.servers {
					if s.Name != "torchd" && s.Name != "tornado" {
						continue
					}
					log.Printf("%s c=%d round %d: %s (wrk)", w.Name, c, round+1, s.Name)
					r, err := h.measure(ctx, s, w, c, round, false)
					if err != nil {
						h.fail("%s c=%d %s wrk: %v", w.Name, c, s.Name, err)
						continue
					}
					key := pointKey{w.Name, c, s.Name, "wrk"}.String()
					h.res.Runs[key] = append(h.res.Runs[key], r)
				}
			}
		}
	}
	return nil
}

func (h *harness) warm(ctx context.Context, s *server, w workload) {
	d := time.Duration(1.5 * h.cfg.scale * float64(time.Second))
	if w.Model == "resnet18" {
		d *= 2
	}
	args := abArgs(16, d, w.ContentType, w.File, s.url(w), filepath.Join(h.cfg.work, "ab", "warm.csv"))
	if _, err := runAB(ctx, args, filepath.Join(h.cfg.work, "ab", "warm.csv")); err != nil {
		log.Printf("warm-up %s on %s: %v", w.Name, s.Name, err)
	}
}

// measure runs one load against one server, sampling the server's CPU time, peak RSS and
// (torchd) mean batch size around it.
func (h *harness) measure(ctx context.Context, s *server, w workload, conc, round int, ab bool) (run, error) {
	cfg := h.cfg
	sum0, cnt0, _ := s.batchCounters(w.Model)
	pids := s.tree.pids()
	cpu0 := s.tree.cpuSeconds(pids)
	smp := startSampler(s.tree)
	var lr loadResult
	var err error
	if ab {
		csv := filepath.Join(cfg.work, "ab", fmt.Sprintf("%s-c%d-%s-r%d.csv", w.Name, conc, s.Name, round))
		var args []string
		if cfg.quick {
			args = abArgsN(conc, max(w.Quick, conc), w.ContentType, w.File, s.url(w), csv)
		} else {
			args = abArgs(conc, w.Duration(conc), w.ContentType, w.File, s.url(w), csv)
		}
		lr, err = runAB(ctx, args, csv)
	} else {
		d := w.Duration(conc)
		if cfg.quick {
			d = time.Second
		}
		lr, err = runWrk(ctx, wrkArgs(conc, d, s.url(w)), w.ContentType, w.File)
	}
	peak := smp.finish()
	cpu1 := s.tree.cpuSeconds(s.tree.pids())
	if err != nil {
		return run{}, err
	}
	r := run{loadResult: lr, Round: round, PeakRSS: peak}
	if lr.Complete > 0 {
		r.CPUPer1k = (cpu1 - cpu0) / float64(lr.Complete) * 1000
	}
	if sum1, cnt1, err := s.batchCounters(w.Model); err == nil && cnt1 > cnt0 {
		r.MeanBatch = (sum1 - sum0) / (cnt1 - cnt0)
	}
	s.peakRSS = max(s.peakRSS, peak)
	if lr.Complete == 0 {
		return r, fmt.Errorf("no request completed")
	}
	return r, nil
}

// checkSmoke fails make bench-smoke unless every step produced its output.
func (h *harness) checkSmoke() error {
	var problems []string
	problems = append(problems, h.res.Errors...)
	for _, w := range h.cfg.workloads() {
		for _, s := range h.servers {
			for _, c := range w.Conc {
				if len(h.res.Runs[pointKey{w.Name, c, s.Name, "ab"}.String()]) == 0 {
					problems = append(problems, fmt.Sprintf("no run of %s c=%d on %s", w.Name, c, s.Name))
				}
			}
		}
	}
	if len(h.servers) < 2 {
		problems = append(problems, fmt.Sprintf("no peer ran: %v", h.res.Unavailable))
	}
	for _, f := range append(plotFiles(h.cfg), h.cfg.doc) {
		if fi, err := os.Stat(f); err != nil || fi.Size() == 0 {
			problems = append(problems, "missing output "+f)
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("smoke run: %s", strings.Join(problems, "; "))
	}
	log.Printf("smoke run: every step worked (%d servers, %d points)", len(h.servers), len(h.res.Runs))
	return nil
}
