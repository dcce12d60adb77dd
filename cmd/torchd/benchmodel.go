package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/backends/libtorch"
	"github.com/torchd/torchd/backends/onnx"
	"github.com/torchd/torchd/backends/openvino"
	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/daemon"
	"github.com/torchd/torchd/handlers"
	"github.com/torchd/torchd/torch"
)

func init() {
	commands["bench-model"] = command{
		summary: "measure a model in-process (preprocess, batched forward, postprocess; no HTTP, no queue)",
		run:     runBenchModel,
	}
}

// benchModelResult is what `torchd bench-model --json` prints; bench/harness reads it as the
// machine's ceiling for the model.
type benchModelResult struct {
	Archive     string `json:"archive"`
	Format      string `json:"format"`  // torchscript, pt2, openvino or onnx
	Runtime     string `json:"runtime"` // libtorch, openvino or onnxruntime: what runs the forward
	Precision   string `json:"precision"`
	Handler     string `json:"handler"`
	Input       string `json:"input"`
	InputBytes  int    `json:"input_bytes"`
	Threads     int    `json:"threads"`
	GOMAXPROCS  int    `json:"gomaxprocs"`
	LibTorch    string `json:"libtorch"`
	Rounds      int    `json:"rounds"`
	PreprocessN int64  `json:"preprocess_ns"`  // median, one request on one goroutine
	PostprocN   int64  `json:"postprocess_ns"` // median, one request on one goroutine
	// SingleN is one request start to end on one goroutine: preprocess, forward of a batch
	// of one, postprocess; the lowest latency the machine gives the model.
	SingleN int64             `json:"single_ns"`
	Batches []benchModelBatch `json:"batches"`
	// BestSequential is the highest Throughput over Batches: one batch at a time, its
	// preprocessing, forward and postprocessing one after the other.
	BestSequential benchModelBatch `json:"best_sequential"`
	// Pipelined are the throughputs with preprocessing overlapped with the forwards, as the
	// server runs them, per batch size and number of workers.
	Pipelined []benchModelPipelined `json:"pipelined"`
	// Best is the highest throughput of all, pipelined or not: the in-process reference.
	Best benchModelPipelined `json:"best"`
	// KeepFreed is whether the C allocator kept LibTorch's freed memory, as the daemon's
	// keep_freed_memory does by default.
	KeepFreed bool `json:"keep_freed_memory"`
}

// benchModelPipelined is one pipelined configuration's figure, the median over rounds.
type benchModelPipelined struct {
	Batch      int     `json:"batch"`
	Workers    int     `json:"workers"`   // forward threads running batches at once
	Threads    int     `json:"threads"`   // intra-op threads of each
	Pipelined  bool    `json:"pipelined"` // false: the best is BestSequential's
	Throughput float64 `json:"throughput"`
	// CPUPerReqN is the process's CPU time (every thread's, user and system) per request: on a
	// shared machine, what a served figure's CPU per request is compared with.
	CPUPerReqN int64 `json:"cpu_ns_per_request"`
}

// benchModelBatch is one batch size's figures, each the median over rounds.
type benchModelBatch struct {
	Batch      int     `json:"batch"`
	ForwardN   int64   `json:"forward_ns"` // handlers.Infer of the batch alone
	CycleN     int64   `json:"cycle_ns"`   // preprocess B requests in parallel, Infer, postprocess in parallel
	Throughput float64 `json:"throughput"` // requests per second: Batch / cycle
	CPUPerReqN int64   `json:"cpu_ns_per_request"`
}

// runBenchModel measures what the server does for a request, without the server: the same
// handler's Preprocess on as many goroutines as there are cores, handlers.Infer on locked OS
// threads with the daemon's intra-op threads, and Postprocess. It measures batch after batch
// (each step waiting for the one before) and pipelined, as the server runs: requests
// preprocessed without pause while one or more workers run the batches. The best of all is
// the in-process reference that docs/benchmarks.md gives every HTTP figure against.
func runBenchModel(args []string) error {
	fs := flag.NewFlagSet("torchd bench-model", flag.ContinueOnError)
	input := fs.String("input", "", "request body file, e.g. a JPEG or an .npy (required)")
	contentType := fs.String("content-type", "", "the request's Content-Type (default: from the file's extension)")
	batchList := fs.String("batch-sizes", "1,2,4,8,16,32", "comma-separated batch sizes")
	threads := fs.Int("threads", 0, "intra-op threads for the forward; 0: the daemon's default with one worker (cores)")
	minTime := fs.Duration("time", time.Second, "least time per batch size per round")
	workerList := fs.String("workers", "", "comma-separated numbers of workers for the pipelined figures, each with threads/workers intra-op threads (default: 1, and 2 where threads allow)")
	rounds := fs.Int("rounds", 3, "rounds; each figure is the median over rounds")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	precision := fs.String("precision", "", "fp32, bf16, fp16, int8 or auto (bf16: TorchScript under autocast; a .pt2 must have been exported in it or carry a variant in it; fp16, int8: packages only; auto: the fastest package this CPU computes natively); default: as the daemon serves the archive")
	device := fs.String("device", "cpu", "cpu, cuda or cuda:N")
	keepFreed := fs.Bool("keep-freed-memory", true, "make the C allocator keep the memory LibTorch frees, as the daemon's keep_freed_memory (its default); false: glibc's own mmap and trimming")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: torchd bench-model --input FILE [flags] ARCHIVE")
		printFlags(fs)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() != 1 || *input == "" {
		fs.Usage()
		return errors.New("need one archive and --input")
	}
	batches, err := parseInts(*batchList)
	if err != nil {
		return fmt.Errorf("--batch-sizes: %w", err)
	}
	if *threads <= 0 {
		*threads = runtime.NumCPU()
	}
	workers := []int{1}
	if *threads >= 2 {
		workers = append(workers, 2)
	}
	if *workerList != "" {
		if workers, err = parseInts(*workerList); err != nil {
			return fmt.Errorf("--workers: %w", err)
		}
	}
	*rounds = max(*rounds, 1)
	body, err := os.ReadFile(*input)
	if err != nil {
		return err
	}
	if *contentType == "" {
		*contentType = contentTypeOf(*input)
	}

	am, err := archive.Open(fs.Arg(0))
	if err != nil {
		return err
	}
	defer am.Close()
	if *precision == "" {
		// As the daemon resolves it: an archive's packages sit just above the defaults.
		*precision = core.Resolve(daemon.ModelDefaults(), core.PackageSettings(am), am.Config.Settings).Precision
	}
	if err := archive.CheckPrecision(*precision); err != nil {
		return fmt.Errorf("--precision: %v", err)
	}
	// "auto" chooses among the archive's packages as the daemon does, for this CPU.
	chosen, reason, err := core.ServedPrecision(am, *precision, *device)
	if err != nil {
		return fmt.Errorf("--precision %s: %v", *precision, err)
	}
	if reason != "" {
		fmt.Fprintf(os.Stderr, "precision auto: %s (%s)\n", chosen, reason)
	}
	*precision = chosen
	if p := am.Package; p != nil {
		for _, n := range batches {
			if err := p.CheckBatchSize(n); err != nil {
				return fmt.Errorf("--batch-sizes: %v", err)
			}
		}
	}
	// As the daemon does at start: without it a big batch's activations go back to the kernel
	// and are faulted in afresh at every forward, which the served forwards do not pay.
	kept := *keepFreed && torch.KeepFreedMemory()
	maxWorkers := slices.Max(workers)
	h, err := handlers.New(am.Config.Handler, handlers.Context{Config: am.Config, Dir: am.Dir, Labels: am.Labels})
	if err != nil {
		return err
	}
	pin := *device != "cpu" // as a daemon worker stages a GPU's batches in page-locked memory
	b := &modelBench{h: h, body: body, contentType: *contentType, fwd: make(chan func()), threads: *threads,
		stage: handlers.NewStage(pin, slices.Max(batches)), pin: pin}
	defer b.stage.Close()
	runtimeName := libtorch.Name
	if rt := otherRuntime(am); rt != nil {
		runtimeName = rt.Name()
		err = b.loadOther(rt, am, *device, *precision, slices.Max(batches), workers)
	} else {
		err = b.loadLibTorch(am, *device, *precision, maxWorkers)
	}
	defer b.close()
	if err != nil {
		return err
	}
	go b.forwardThread()
	defer close(b.fwd)

	res := benchModelResult{
		Archive: fs.Arg(0), Format: "torchscript", Precision: *precision, Handler: am.Config.Handler, Input: *input, InputBytes: len(body),
		Threads: *threads, GOMAXPROCS: runtime.GOMAXPROCS(0), LibTorch: torch.Version(), Rounds: *rounds,
		KeepFreed: kept, Runtime: runtimeName,
	}
	switch {
	case am.IsPackage():
		res.Format = "pt2"
	case runtimeName == openvino.Name:
		res.Format = "openvino"
	case runtimeName == onnx.Name:
		res.Format = "onnx"
	}
	// Warm-up: TorchScript's profiling executor settles after a few runs per shape.
	for _, n := range batches {
		for range 3 {
			if _, err := b.cycle(n); err != nil {
				return err
			}
		}
	}
	var pre, post, single []time.Duration
	fwd := make([][]time.Duration, len(batches))
	cyc := make([][]time.Duration, len(batches))
	pipes := make([][]float64, len(batches)*len(workers))
	cpuSeq := make([][]time.Duration, len(batches))
	cpuPipe := make([][]time.Duration, len(batches)*len(workers))
	for range *rounds {
		p, q, s, err := b.singles(*minTime)
		if err != nil {
			return err
		}
		pre, post, single = append(pre, p), append(post, q), append(single, s)
		for i, n := range batches {
			f, c, cpu, err := b.batchRound(n, *minTime)
			if err != nil {
				return err
			}
			fwd[i], cyc[i], cpuSeq[i] = append(fwd[i], f), append(cyc[i], c), append(cpuSeq[i], cpu)
		}
		for i, n := range batches {
			for j, w := range workers {
				r, cpu, err := b.pipelined(n, w, max(*threads/w, 1), *minTime)
				if err != nil {
					return err
				}
				k := i*len(workers) + j
				pipes[k], cpuPipe[k] = append(pipes[k], r), append(cpuPipe[k], cpu)
			}
		}
	}
	res.PreprocessN, res.PostprocN, res.SingleN = int64(median(pre)), int64(median(post)), int64(median(single))
	for i, n := range batches {
		c := median(cyc[i])
		bb := benchModelBatch{Batch: n, ForwardN: int64(median(fwd[i])), CycleN: int64(c), Throughput: float64(n) / c.Seconds(), CPUPerReqN: int64(median(cpuSeq[i]))}
		res.Batches = append(res.Batches, bb)
		if bb.Throughput > res.BestSequential.Throughput {
			res.BestSequential = bb
		}
	}
	res.Best = benchModelPipelined{Batch: res.BestSequential.Batch, Workers: 1, Threads: *threads, Throughput: res.BestSequential.Throughput, CPUPerReqN: res.BestSequential.CPUPerReqN}
	for i, n := range batches {
		for j, w := range workers {
			k := i*len(workers) + j
			p := benchModelPipelined{Batch: n, Workers: w, Threads: max(*threads/w, 1), Pipelined: true, Throughput: median(pipes[k]), CPUPerReqN: int64(median(cpuPipe[k]))}
			res.Pipelined = append(res.Pipelined, p)
			if p.Throughput > res.Best.Throughput {
				res.Best = p
			}
		}
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	printBenchModel(res)
	return nil
}

// modelBench holds one model and one request body. Forwards run on one locked OS thread,
// as on a daemon worker, because LibTorch's thread settings belong to the calling thread.
type modelBench struct {
	h           handlers.Handler
	body        []byte
	contentType string
	threads     int
	fwd         chan func()
	// run runs a batch with as many workers at once as the count says: LibTorch's model is one
	// for every count (each forward takes its thread's count); another runtime's threads are
	// fixed when it compiles, so it has one model per count, as the daemon's workers have.
	// Each forward thread stacks its batches into a stage of its own, as a daemon worker does.
	run    func(workers int, batch []*handlers.Sample, st *handlers.Stage) ([][]handlers.Tensor, error)
	stage  *handlers.Stage // the forward thread's
	rows   batchRows       // cycle's batch
	pin    bool
	closes []func() error
}

func (b *modelBench) close() {
	for _, c := range b.closes {
		c()
	}
}

// loadLibTorch loads a TorchScript model or a package, with the handler bound to it.
func (b *modelBench) loadLibTorch(am *archive.Model, device, precision string, maxWorkers int) error {
	m, err := libtorch.LoadModel(am, daemon.ModelSettings{Device: device, Precision: precision, MaxWorkers: maxWorkers})
	if err != nil {
		return err
	}
	b.closes = append(b.closes, m.Close)
	bound, err := handlers.Bind(b.h, m, maxWorkers)
	if err != nil {
		return err
	}
	b.run = func(_ int, batch []*handlers.Sample, st *handlers.Stage) ([][]handlers.Tensor, error) {
		return handlers.InferStaged(b.h, bound, batch, st)
	}
	return nil
}

// otherRuntime is the runtime other than LibTorch that serves am (OpenVINO IR, ONNX), as
// the daemon picks it; nil for LibTorch's models.
func otherRuntime(am *archive.Model) core.Runtime {
	for _, rt := range []core.Runtime{&openvino.Backend{}, &onnx.Backend{}} {
		if rt.Accepts(am) {
			return rt
		}
	}
	return nil
}

// loadOther loads am with rt once per worker count, each as the daemon loads a version with
// that many workers: a worker's threads are the bench's threads shared among them.
func (b *modelBench) loadOther(rt core.Runtime, am *archive.Model, device, precision string, maxBatch int, workers []int) error {
	models := map[int]core.Model{}
	for _, w := range append([]int{1}, workers...) {
		if models[w] != nil {
			continue
		}
		s := daemon.ModelSettings{Device: device, Precision: precision, BatchSize: maxBatch, MinWorkers: w, MaxWorkers: w}
		m, err := rt.Load(core.LoadRequest{Name: "bench", Version: "1", Archive: am, Settings: s, Threads: max(b.threads/w, 1)})
		if err != nil {
			return err
		}
		b.closes = append(b.closes, m.Close)
		if hb, ok := m.(core.HandlerBinder); ok {
			if err := hb.BindHandler(b.h); err != nil {
				return err
			}
		}
		models[w] = m
	}
	b.run = func(w int, batch []*handlers.Sample, st *handlers.Stage) ([][]handlers.Tensor, error) {
		return models[w].Run(batch, st)
	}
	return nil
}

func (b *modelBench) forwardThread() {
	runtime.LockOSThread()
	torch.SetNumThreads(b.threads)
	// As a pool's worker sets its count, which also gives its forwards a forward thread.
	torch.SetNumThreadsHere(b.threads)
	for f := range b.fwd {
		f()
	}
}

func (b *modelBench) request() *handlers.Request {
	return &handlers.Request{
		Inputs: []handlers.Payload{{Name: "body", ContentType: b.contentType, Data: b.body}},
		Header: func(name string) string {
			if strings.EqualFold(name, "Content-Type") {
				return b.contentType
			}
			return ""
		},
	}
}

func (b *modelBench) infer(batch []*handlers.Sample) (outs [][]handlers.Tensor, d time.Duration, err error) {
	done := make(chan struct{})
	b.fwd <- func() {
		start := time.Now()
		outs, err = b.run(1, batch, b.stage)
		d = time.Since(start)
		close(done)
	}
	<-done
	return outs, d, err
}

// parallel runs f(i) for i in [0, n) on up to GOMAXPROCS goroutines, as the server's request
// goroutines would.
func parallel(n int, f func(i int) error) error {
	workers := min(n, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	errs := make([]error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				if err := f(i); err != nil {
					errs[w] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// cycle serves n requests as one batch and returns the forward's time. They preprocess into
// the adjoining rows of one batch, as the daemon's do.
func (b *modelBench) cycle(n int) (time.Duration, error) {
	samples := make([]*handlers.Sample, n)
	b.rows.reuse(n)
	if err := parallel(n, func(i int) error {
		s, err := b.h.Preprocess(b.rows.request(b, i))
		samples[i] = s
		return err
	}); err != nil {
		return 0, err
	}
	outs, d, err := b.infer(samples)
	if err != nil {
		return 0, err
	}
	return d, parallel(n, func(i int) error {
		_, err := b.h.Postprocess(samples[i], outs[i])
		return err
	})
}

// batchRound repeats cycles of n for at least minTime and returns the median forward, the
// median whole cycle and the process's CPU time per request.
func (b *modelBench) batchRound(n int, minTime time.Duration) (fwd, cyc, cpu time.Duration, err error) {
	var fs, cs []time.Duration
	start, cpu0 := time.Now(), cpuTime()
	for len(cs) < 3 || time.Since(start) < minTime {
		t0 := time.Now()
		f, err := b.cycle(n)
		if err != nil {
			return 0, 0, 0, err
		}
		cs = append(cs, time.Since(t0))
		fs = append(fs, f)
	}
	return median(fs), median(cs), (cpuTime() - cpu0) / time.Duration(len(cs)*n), nil
}

// cpuTime is the CPU time of every thread of the process, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// pipelined serves requests for at least minTime as the server does: a goroutine per core
// preprocesses requests without pause into a queue, workers forward threads (locked, with
// threads intra-op threads each) take batches of n from it, and the batches' postprocessing
// runs on other goroutines. It returns the requests finished per second, counted after a
// warm-up.
func (b *modelBench) pipelined(n, workers, threads int, minTime time.Duration) (float64, time.Duration, error) {
	stop := make(chan struct{})
	// A batch's requests preprocess into its rows (batchRows), request after request in
	// the order they took their rows, as the daemon's window gives them; workers+2 batches
	// preprocess, wait, run or postprocess at once.
	type pending struct {
		rows    batchRows
		samples []*handlers.Sample
		ready   atomic.Int64
		outs    [][]handlers.Tensor
	}
	free, queue := make(chan *pending, workers+2), make(chan *pending, workers+2)
	for range workers + 2 {
		free <- &pending{samples: make([]*handlers.Sample, n)}
	}
	var takeMu sync.Mutex
	var taken int
	var cur *pending
	take := func() (*pending, int, bool) {
		takeMu.Lock()
		defer takeMu.Unlock()
		if taken%n == 0 {
			select {
			case cur = <-free:
				cur.rows.reuse(n)
				cur.ready.Store(0)
			case <-stop:
				return nil, 0, false
			}
		}
		i := taken % n
		taken++
		return cur, i, true
	}
	post := make(chan *pending, 2*workers)
	var errMu sync.Mutex
	var firstErr error
	var stopOnce sync.Once
	end := func() { stopOnce.Do(func() { close(stop) }) }
	fail := func(err error) {
		errMu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		errMu.Unlock()
		end()
	}
	// The window opens and closes at a batch's end, so that it holds whole batches only: read
	// at a tick instead, a one-second window of ten batches was off by up to one either way,
	// and the best of several such figures sat above what the model sustains.
	var doneMu sync.Mutex
	var done struct {
		n   int64
		at  time.Time
		cpu time.Duration
	}
	snap := func() (int64, time.Time, time.Duration) {
		doneMu.Lock()
		defer doneMu.Unlock()
		return done.n, done.at, done.cpu
	}
	var producers, forwards, posts sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		producers.Go(func() {
			for {
				p, i, ok := take()
				if !ok {
					return
				}
				s, err := b.h.Preprocess(p.rows.request(b, i))
				if err != nil {
					fail(err)
					return
				}
				p.samples[i] = s
				if p.ready.Add(1) == int64(n) {
					select {
					case queue <- p:
					case <-stop:
						return
					}
				}
			}
		})
		posts.Go(func() {
			for p := range post {
				for i, s := range p.samples {
					if _, err := b.h.Postprocess(s, p.outs[i]); err != nil {
						fail(err)
					}
				}
				at, cpu := time.Now(), cpuTime()
				doneMu.Lock()
				done.n, done.at, done.cpu = done.n+int64(n), at, cpu
				doneMu.Unlock()
				free <- p
			}
		})
	}
	for range workers {
		forwards.Go(func() {
			runtime.LockOSThread() // never unlocked: the thread ends with its OpenMP pool
			torch.SetNumThreadsHere(threads)
			st := handlers.NewStage(b.pin, n)
			defer st.Close()
			for {
				var p *pending
				select {
				case p = <-queue:
				case <-stop:
					return
				}
				var err error
				if p.outs, err = b.run(workers, p.samples, st); err != nil {
					fail(err)
					return
				}
				post <- p
			}
		})
	}
	// The count starts once each worker has run about one batch (a new thread's first
	// forwards are slow), and ends past minTime with at least two batches a worker counted.
	wait := func(until func() bool) {
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for !until() {
			select {
			case <-tick.C:
			case <-stop:
				return
			}
		}
	}
	batchesDone := func(from int64, k int) func() bool {
		return func() bool { c, _, _ := snap(); return c-from >= int64(k*n*workers) }
	}
	wait(batchesDone(0, 1))
	c0, t0, cpu0 := snap()
	enough := batchesDone(c0, 2)
	wait(func() bool { return time.Since(t0) >= minTime && enough() })
	c1, t1, cpu1 := snap()
	end()
	producers.Wait()
	forwards.Wait()
	close(post)
	posts.Wait()
	if firstErr != nil {
		return 0, 0, firstErr
	}
	return float64(c1-c0) / t1.Sub(t0).Seconds(), (cpu1 - cpu0) / time.Duration(max(c1-c0, 1)), nil
}

// singles times one request at a time, on one goroutine, for at least minTime: the
// medians of its preprocess, its postprocess and the whole request.
func (b *modelBench) singles(minTime time.Duration) (pre, post, whole time.Duration, err error) {
	var ps, qs, ws []time.Duration
	start := time.Now()
	for len(ws) < 5 || time.Since(start) < minTime {
		t0 := time.Now()
		s, err := b.h.Preprocess(b.request())
		if err != nil {
			return 0, 0, 0, err
		}
		t1 := time.Now()
		outs, _, err := b.infer([]*handlers.Sample{s})
		if err != nil {
			return 0, 0, 0, err
		}
		t2 := time.Now()
		if _, err := b.h.Postprocess(s, outs[0]); err != nil {
			return 0, 0, 0, err
		}
		t3 := time.Now()
		ps, qs, ws = append(ps, t1.Sub(t0)), append(qs, t3.Sub(t2)), append(ws, t3.Sub(t0))
	}
	return median(ps), median(qs), median(ws), nil
}

func printBenchModel(r benchModelResult) {
	rt := "LibTorch " + r.LibTorch
	if r.Runtime != libtorch.Name {
		rt = r.Runtime
	}
	fmt.Printf("%s (%s, %s %s), input %s (%d bytes), %d intra-op threads, GOMAXPROCS %d, %s, median of %d rounds\n",
		r.Archive, r.Handler, r.Format, r.Precision, r.Input, r.InputBytes, r.Threads, r.GOMAXPROCS, rt, r.Rounds)
	fmt.Printf("one request: preprocess %v, postprocess %v, end to end %v\n",
		time.Duration(r.PreprocessN), time.Duration(r.PostprocN), time.Duration(r.SingleN))
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "batch\tforward\tcycle\treq/s\tCPU/req\t")
	for _, b := range r.Batches {
		fmt.Fprintf(tw, "%d\t%v\t%v\t%.1f\t%v\t\n", b.Batch, time.Duration(b.ForwardN), time.Duration(b.CycleN), b.Throughput, time.Duration(b.CPUPerReqN))
	}
	tw.Flush()
	fmt.Println("pipelined (preprocessing overlapped with the forwards, as the server runs):")
	tw = tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "batch\tworkers\tthreads\treq/s\tCPU/req\t")
	for _, p := range r.Pipelined {
		fmt.Fprintf(tw, "%d\t%d\t%d\t%.1f\t%v\t\n", p.Batch, p.Workers, p.Threads, p.Throughput, time.Duration(p.CPUPerReqN))
	}
	tw.Flush()
	how := "one batch at a time"
	if r.Best.Pipelined {
		how = fmt.Sprintf("pipelined: workers %d, threads %d each", r.Best.Workers, r.Best.Threads)
	}
	fmt.Printf("reference: %.1f req/s at batch %d (%s); batch-1 latency %v\n", r.Best.Throughput, r.Best.Batch, how, time.Duration(r.SingleN))
}

// median is the middle of v (the mean of the two middle values for an even count); 0 for none.
func median[T ~float64 | ~int64](v []T) T {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive integer", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// contentTypeOf guesses a request's Content-Type from its file name, as curl users set it.
func contentTypeOf(name string) string {
	switch n := strings.ToLower(name); {
	case strings.HasSuffix(n, ".jpg"), strings.HasSuffix(n, ".jpeg"):
		return "image/jpeg"
	case strings.HasSuffix(n, ".png"):
		return "image/png"
	case strings.HasSuffix(n, ".npy"):
		return "application/x-npy"
	case strings.HasSuffix(n, ".json"):
		return "application/json"
	}
	return "application/octet-stream"
}
