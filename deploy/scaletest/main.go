// Command scaletest shows, on one machine, that torchd scales out and fails over behind a
// load balancer without losing requests: the shape of deploy/kubernetes without a cluster.
//
// Three replicas of bin/torchd run as pods would: each in its own network namespace with its
// own address (a veth pair to the root namespace), each under a CPU limit (a CFS quota on
// its cgroup), one worker per model, the same models. nginx in the root namespace balances
// over them with passive health checks and retries on connection failure (nginx.go). ab
// drives it with the digits PNG classifier. The run measures throughput with 1, 2 and 3
// replicas, then kills one replica with SIGKILL during a run, restarts it, and sends SIGTERM
// to another during a run, and asserts that no accepted request was lost, that the SIGTERMed
// replica answered its queue before exiting, and counts what nginx retried.
//
// It needs root (ip netns, cgroups), iproute2, nginx and ab; without permission for network
// namespaces it falls back to distinct loopback addresses and says so. `make scale-test`
// runs it; docs/guide/scale-out.md has its figures. Results: <out>/results.json and summary.md.
//
// One file over 600 lines on purpose: it reads as the run's script, replicas to failover in
// order; the load balancer's config is apart (nginx.go).
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

type options struct {
	torchd, store, out  string
	image, resnetImage  string
	models              string
	replicas            int
	cpus                float64
	threads             int
	duration            time.Duration
	concurrency, rounds int
	failTimeout, slow   int
}

// env is everything the run started; close undoes it, in reverse, once.
type env struct {
	o         *options
	isolation string
	replicas  []*replica
	lb        *nginx
	ports     []int
	undo      []func()
	closeOnce sync.Once
}

func (e *env) close() {
	e.closeOnce.Do(func() {
		for i := len(e.undo) - 1; i >= 0; i-- {
			e.undo[i]()
		}
	})
}

func main() {
	o := &options{}
	flag.StringVar(&o.torchd, "torchd", "bin/torchd", "the torchd binary")
	flag.StringVar(&o.store, "store", "model-store", "model store with digits.mar, slow.mar and resnet18.mar")
	flag.StringVar(&o.out, "out", "build/scale", "where logs, the nginx configuration and the results go")
	flag.StringVar(&o.image, "image", "models/out/digits/heldout/0000_2.png", "the PNG every digits request posts")
	flag.StringVar(&o.resnetImage, "resnet-image", "models/out/resnet18/sample_224.png", "the image for the single-replica ResNet-18 figure")
	flag.StringVar(&o.models, "models", "digits=digits.mar,slow=slow.mar,resnet18=resnet18.mar", "models every replica loads")
	flag.IntVar(&o.replicas, "replicas", 3, "replicas (at least 3: one is killed, one drained, one stays)")
	flag.Float64Var(&o.cpus, "cpus", 1, "CPU limit per replica, as a pod's limits.cpu (0: none)")
	flag.IntVar(&o.threads, "threads", 1, "intra-op threads per worker (match -cpus)")
	flag.DurationVar(&o.duration, "duration", 5*time.Second, "length of each throughput run")
	flag.IntVar(&o.concurrency, "c", 32, "ab concurrency")
	flag.IntVar(&o.rounds, "rounds", 2, "rounds of the 1, 2, 3 replica runs, interleaved")
	flag.IntVar(&o.failTimeout, "fail-timeout", 5, "nginx fail_timeout (s): how long a failed replica is left out")
	flag.IntVar(&o.slow, "slow", 8, "slow-model requests queued on the replica that is drained")
	flag.Parse()
	log.SetFlags(log.Ltime)

	res, err := run(o)
	if res != nil {
		writeResults(o, res)
	}
	if err != nil {
		log.Printf("FAIL: %v", err)
		os.Exit(1)
	}
	if len(res.Failures) > 0 {
		for _, f := range res.Failures {
			log.Printf("FAIL: %s", f)
		}
		os.Exit(1)
	}
	log.Printf("PASS: results in %s", o.out)
}

func run(o *options) (*results, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("needs root: network namespaces, veth pairs and cgroups")
	}
	for _, p := range []*string{&o.torchd, &o.store, &o.out, &o.image, &o.resnetImage} {
		abs, err := filepath.Abs(*p)
		if err != nil {
			return nil, err
		}
		*p = abs
	}
	for _, tool := range []string{"ip", "nginx", "ab"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("%s not found (make scale-test installs iproute2, nginx and apache2-utils)", tool)
		}
	}
	for _, f := range []string{o.torchd, o.image, o.resnetImage, filepath.Join(o.store, "digits.mar"), filepath.Join(o.store, "slow.mar"), filepath.Join(o.store, "resnet18.mar")} {
		if _, err := os.Stat(f); err != nil {
			return nil, fmt.Errorf("%v (make build archives)", err)
		}
	}
	if o.replicas < 3 {
		return nil, errors.New("-replicas must be at least 3")
	}
	os.RemoveAll(o.out)
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return nil, err
	}

	e := &env{o: o}
	defer e.close()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		s := <-sigs
		log.Printf("%v: cleaning up", s)
		e.close()
		os.Exit(1)
	}()

	res := &results{Started: time.Now().UTC(), Options: o.summary()}
	res.Host = hostInfo()
	res.LoadAvg = append(res.LoadAvg, loadAvg())
	steal0 := stealSeconds()
	if err := e.setup(res); err != nil {
		return res, err
	}
	if err := e.measure(res); err != nil {
		return res, err
	}
	if err := e.failovers(res); err != nil {
		return res, err
	}
	res.StealSeconds = stealSeconds() - steal0
	res.LoadAvg = append(res.LoadAvg, loadAvg())
	res.Finished = time.Now().UTC()
	return res, nil
}

// setup creates the networks, cgroups, replicas and load balancer.
func (e *env) setup(res *results) error {
	o := e.o
	useNetns := true
	if err := netnsAvailable(); err != nil {
		useNetns = false
		log.Printf("WARNING: network namespaces not permitted (%v): replicas get distinct loopback addresses instead; the test still covers balancing, retries and drain, but not separate network stacks", err)
	}
	res.Isolation = "network namespace per replica, veth pair to the root namespace, point-to-point /30"
	if !useNetns {
		res.Isolation = "FALLBACK: distinct loopback addresses 127.0.0.11-13 (network namespaces not permitted)"
	}
	for i := 1; i <= o.replicas; i++ {
		r := &replica{ID: i, logPath: filepath.Join(o.out, fmt.Sprintf("replica-%d.log", i))}
		if useNetns {
			n, err := setupPodNet(i)
			if err != nil {
				return err
			}
			e.undo = append(e.undo, n.teardown)
			r.net = n
		} else {
			r.net = loopbackPodNet(i)
		}
		if o.cpus > 0 {
			c, err := newCPULimit(fmt.Sprintf("tdscale-%d", i), o.cpus)
			if err != nil {
				log.Printf("WARNING: no CPU limit for replica %d: %v", i, err)
				res.CPULimit = "none (cgroup not writable)"
			} else {
				e.undo = append(e.undo, c.remove)
				r.cpu = c
				res.CPULimit = fmt.Sprintf("%g CPU per replica (CFS quota %d µs per %d µs)", o.cpus, int(o.cpus*cfsPeriodUS), cfsPeriodUS)
			}
		}
		e.replicas = append(e.replicas, r)
	}
	// Replicas stop before their networks and cgroups go.
	e.undo = append(e.undo, func() {
		var wg sync.WaitGroup
		for _, r := range e.replicas {
			wg.Add(1)
			go func() { defer wg.Done(); r.stop() }()
		}
		wg.Wait()
	})
	log.Printf("starting %d replicas (%s; %s)", o.replicas, res.Isolation, res.CPULimit)
	for _, r := range e.replicas {
		if err := r.start(o); err != nil {
			return err
		}
	}
	for _, r := range e.replicas {
		d, err := r.waitReady(3 * time.Minute)
		if err != nil {
			return err
		}
		res.ReadySeconds = append(res.ReadySeconds, d.Seconds())
		log.Printf("replica %d ready at %s after %.1f s", r.ID, r.Addr(), d.Seconds())
	}
	var pools [][]string
	for k := 1; k <= o.replicas; k++ {
		var pool []string
		for _, r := range e.replicas[:k] {
			pool = append(pool, r.Addr())
		}
		pools = append(pools, pool)
		e.ports = append(e.ports, 18180+k)
	}
	lb, err := startNginx(filepath.Join(o.out, "nginx"), pools, e.ports, o.failTimeout)
	if err != nil {
		return err
	}
	e.lb = lb
	e.undo = append(e.undo, lb.stop)
	log.Printf("nginx listening on 127.0.0.1:%v (pools of 1..%d replicas)", e.ports, o.replicas)
	return nil
}

func (e *env) poolURL(k int, path string) string {
	return fmt.Sprintf("http://127.0.0.1:%d%s", e.ports[k-1], path)
}

// measure: a warm-up, one replica without the load balancer, then 1, 2, 3 replicas through
// it, interleaved over rounds so that drift of the shared host spreads over all sizes, and
// a single-replica ResNet-18 figure for the capacity estimate.
func (e *env) measure(res *results) error {
	o := e.o
	log.Printf("warm-up: 2 s through %d replicas", o.replicas)
	if _, _, err := runAB(e.poolURL(o.replicas, "/predictions/digits"), o.image, "image/png", o.concurrency, 10000000, 2*time.Second); err != nil {
		return err
	}
	r1 := e.replicas[0]
	ab, text, err := runAB(r1.InferenceURL()+"/predictions/digits", o.image, "image/png", o.concurrency, 10000000, o.duration)
	if err != nil {
		return err
	}
	os.WriteFile(filepath.Join(o.out, "ab-direct.txt"), []byte(text), 0o644)
	res.Direct = ab
	log.Printf("direct to replica 1: %.0f req/s, p50 %d ms, p99 %d ms", ab.RPS, ab.P50, ab.P99)

	// Two models: digits, cheap enough that HTTP, PNG decoding, the load balancer and ab
	// itself dominate, and ResNet-18, whose forward dominates everything else.
	type workload struct {
		model, image string
		c            int
		d            time.Duration
	}
	for _, w := range []workload{
		{"digits", o.image, o.concurrency, o.duration},
		{"resnet18", o.resnetImage, 16, max(o.duration, 8*time.Second)},
	} {
		if w.model == "resnet18" {
			// One request at a time on one replica: preprocessing and the forward without
			// queueing or contention, the per-image costs the capacity estimate starts from.
			s, err := e.scaleRun(w.model, w.image, 1, w.d, 1, 0)
			if err != nil {
				return err
			}
			res.Unloaded = s
			log.Printf("resnet18, c=1, 1 replica: %.1f req/s, p50 %d ms, preprocess %.1f ms, forward %.1f ms/img at batch %.1f, torchd CPU %.1f ms/req",
				s.AB.RPS, s.AB.P50, s.PreprocessMS, s.ForwardMSPerImage, s.MeanBatch, s.TorchdCPUPerRequestUS/1e3)
		}
		if _, _, err := runAB(e.poolURL(o.replicas, "/predictions/"+w.model), w.image, "image/png", w.c, 10000000, 2*time.Second); err != nil {
			return err
		}
		for round := 1; round <= o.rounds; round++ {
			for k := 1; k <= o.replicas; k++ {
				s, err := e.scaleRun(w.model, w.image, w.c, w.d, k, round)
				if err != nil {
					return err
				}
				res.Scaling = append(res.Scaling, s)
				log.Printf("%s, round %d, %d replicas: %.1f req/s, p50 %d ms, p99 %d ms, shares %v, CPU µs/request: torchd %.0f, nginx %.0f, ab %.0f",
					w.model, round, k, s.AB.RPS, s.AB.P50, s.AB.P99, s.Shares, s.TorchdCPUPerRequestUS, s.NginxCPUPerRequestUS, s.ABCPUPerRequestUS)
			}
		}
	}
	return nil
}

func (e *env) scaleRun(model, image string, c int, d time.Duration, k, round int) (*scaleRun, error) {
	o := e.o
	s := &scaleRun{Model: model, Replicas: k, Round: round, Concurrency: c, Shares: map[string]int{}, Statuses: map[int]int{}}
	cpu0 := e.cpuSnapshot()
	thr0 := e.throttleSnapshot()
	st0 := e.modelSums(model)
	off := e.lb.logOffset()
	ab, text, err := runAB(e.poolURL(k, "/predictions/"+model), image, "image/png", c, 10000000, d)
	if err != nil {
		return nil, err
	}
	os.WriteFile(filepath.Join(o.out, fmt.Sprintf("ab-%s-%d-round-%d.txt", model, k, round)), []byte(text), 0o644)
	cpu1 := e.cpuSnapshot()
	thr1 := e.throttleSnapshot()
	st1 := e.modelSums(model)
	s.AB = ab
	delta := func(name string) float64 { return st1[name] - st0[name] }
	if n := delta("torchd_batch_size_count"); n > 0 {
		s.MeanBatch = delta("torchd_batch_size_sum") / n
		s.ForwardMSPerImage = delta("torchd_inference_seconds_sum") / delta("torchd_batch_size_sum") * 1e3
	}
	if n := delta("torchd_preprocess_seconds_count"); n > 0 {
		s.PreprocessMS = delta("torchd_preprocess_seconds_sum") / n * 1e3
	}
	if n := delta("torchd_queue_seconds_count"); n > 0 {
		s.QueueMS = delta("torchd_queue_seconds_sum") / n * 1e3
	}
	for _, r := range e.replicas {
		if m, err := r.metrics(); err == nil {
			s.RSSMiB = append(s.RSSMiB, m["process_resident_memory_bytes"]/(1<<20))
		}
	}
	var torchdCPU float64
	for i := range e.replicas {
		s.ReplicaCPU = append(s.ReplicaCPU, cpu1.replicas[i]-cpu0.replicas[i])
		s.ThrottledSeconds = append(s.ThrottledSeconds, thr1[i]-thr0[i])
		torchdCPU += cpu1.replicas[i] - cpu0.replicas[i]
	}
	s.NginxCPU = cpu1.nginx - cpu0.nginx
	perReq := func(sec float64) float64 { return sec / float64(ab.Complete) * 1e6 }
	s.TorchdCPUPerRequestUS = perReq(torchdCPU)
	s.NginxCPUPerRequestUS = perReq(s.NginxCPU)
	s.ABCPUPerRequestUS = perReq(ab.CPUSeconds)
	lines, err := e.lb.linesSince(off, e.ports[k-1])
	if err != nil {
		return nil, err
	}
	for _, l := range lines {
		s.Statuses[l.Status]++
		if l.Status == 200 {
			s.Shares[e.replicaName(l.Final())]++
		}
	}
	return s, nil
}

// modelSums adds up a model's histogram sums and counts over the running replicas.
func (e *env) modelSums(model string) map[string]float64 {
	out := map[string]float64{}
	for _, r := range e.replicas {
		m, err := r.metrics()
		if err != nil {
			continue
		}
		for _, h := range []string{"torchd_batch_size", "torchd_inference_seconds", "torchd_preprocess_seconds", "torchd_queue_seconds"} {
			for _, suffix := range []string{"_sum", "_count"} {
				out[h+suffix] += sumSeries(m, h+suffix, `model="`+model+`"`)
			}
		}
	}
	return out
}

type cpuSnap struct {
	replicas []float64
	nginx    float64
}

func (e *env) cpuSnapshot() cpuSnap {
	var s cpuSnap
	for _, r := range e.replicas {
		s.replicas = append(s.replicas, r.cpuSeconds())
	}
	s.nginx = e.lb.cpuSeconds()
	return s
}

func (e *env) throttleSnapshot() []float64 {
	var out []float64
	for _, r := range e.replicas {
		_, sec := r.cpu.throttled()
		out = append(out, sec)
	}
	return out
}

// replicaName turns an upstream address into "replica-N".
func (e *env) replicaName(addr string) string {
	for _, r := range e.replicas {
		if r.Addr() == addr {
			return fmt.Sprintf("replica-%d", r.ID)
		}
	}
	return addr
}

// failovers: SIGKILL replica 1 during a run, restart it, then SIGTERM replica 2 during a run.
func (e *env) failovers(res *results) error {
	o := e.o
	// Long enough to kill a third of the way in: about six seconds at the measured rate.
	var best float64
	for _, s := range res.Scaling {
		if s.Model == "digits" && s.Replicas == o.replicas && s.AB.RPS > best {
			best = s.AB.RPS
		}
	}
	n := min(max(int(best*6)/100*100, 3000), 30000)

	log.Printf("fail-over 1: SIGKILL replica 1 a third of the way into %d requests", n)
	kill, err := e.failover(e.replicas[0], syscall.SIGKILL, n, 0, 0)
	if err != nil {
		return err
	}
	res.Kill = kill
	res.check(kill.AB.Failed == 0 && kill.AB.Non2xx == 0 && kill.AB.Complete == n,
		"SIGKILL run: ab complete %d of %d, failed %d, non-2xx %d", kill.AB.Complete, n, kill.AB.Failed, kill.AB.Non2xx)
	res.check(kill.LBAccepted == n && kill.Statuses[200] == n,
		"SIGKILL run: nginx accepted %d requests, answered %v", kill.LBAccepted, kill.Statuses)
	res.check(kill.Retried > 0, "SIGKILL run: nginx retried nothing, so the kill did not hit a request in flight")
	res.check(kill.VictimAnsweredBefore > 0, "SIGKILL run: replica 1 answered nothing before it was killed")

	// Restarted, as the kubelet restarts a killed container; traffic comes back to it once
	// it is ready and nginx's fail_timeout has passed.
	d, err := e.restart(e.replicas[0])
	if err != nil {
		return err
	}
	res.RestartReadySeconds = d.Seconds()

	log.Printf("fail-over 2: SIGTERM replica 2 a third of the way into %d requests, with %d slow requests queued on it", n, o.slow)
	term, err := e.failover(e.replicas[1], syscall.SIGTERM, n, o.slow, 0)
	if err != nil {
		return err
	}
	res.Term = term
	res.check(term.AB.Failed == 0 && term.AB.Non2xx == 0 && term.AB.Complete == n,
		"SIGTERM run: ab complete %d of %d, failed %d, non-2xx %d", term.AB.Complete, n, term.AB.Failed, term.AB.Non2xx)
	res.check(term.LBAccepted == n && term.Statuses[200] == n,
		"SIGTERM run: nginx accepted %d requests, answered %v", term.LBAccepted, term.Statuses)
	res.check(term.ByReplica["replica-1"] > 0, "SIGTERM run: the restarted replica 1 got no traffic back")
	dr := term.Drain
	res.check(dr.SlowOK == dr.Slow, "SIGTERM run: %d of %d requests queued on replica 2 answered 200 (%v)", dr.SlowOK, dr.Slow, dr.SlowStatuses)
	res.check(dr.QueueDepthAtSignal >= 1, "SIGTERM run: replica 2's queue was empty at SIGTERM (%g), so the drain was not tested", dr.QueueDepthAtSignal)
	res.check(dr.SlowAnsweredAfterSignal >= int(dr.QueueDepthAtSignal),
		"SIGTERM run: replica 2 answered %d slow requests after SIGTERM, fewer than the %g queued", dr.SlowAnsweredAfterSignal, dr.QueueDepthAtSignal)
	res.check(dr.Exited && dr.ExitCode == 0, "SIGTERM run: replica 2 exited %v with code %d", dr.Exited, dr.ExitCode)
	res.check(dr.LogShuttingDown && dr.LogStopped && dr.LastAnswerBeforeStopped,
		"SIGTERM run: replica 2's log lacks the drain sequence (shutting down %v, stopped %v, answers before stopped %v)",
		dr.LogShuttingDown, dr.LogStopped, dr.LastAnswerBeforeStopped)

	// Kubernetes' order: the pod leaves the endpoints first (here: nginx reloads without
	// it), its preStop hook sleeps, and only then does SIGTERM come. The load balancer then
	// never meets the closed listener, and nothing needs retrying.
	if _, err := e.restart(e.replicas[1]); err != nil {
		return err
	}
	log.Printf("fail-over 3: replica 3 out of the load balancer, then SIGTERM 2 s later, a third of the way into %d requests", n)
	k8s, err := e.failover(e.replicas[2], syscall.SIGTERM, n, 0, 2*time.Second)
	if err != nil {
		return err
	}
	res.Deregistered = k8s
	res.check(k8s.AB.Failed == 0 && k8s.AB.Non2xx == 0 && k8s.AB.Complete == n && k8s.LBAccepted == n && k8s.Statuses[200] == n,
		"deregister-then-SIGTERM run: ab complete %d of %d, failed %d, non-2xx %d; nginx %v", k8s.AB.Complete, n, k8s.AB.Failed, k8s.AB.Non2xx, k8s.Statuses)
	res.check(k8s.Drain.Exited && k8s.Drain.ExitCode == 0 && k8s.Drain.LogStopped,
		"deregister-then-SIGTERM run: replica 3 exited %v with code %d", k8s.Drain.Exited, k8s.Drain.ExitCode)
	return nil
}

// restart starts a replica again after it exited, waits until it is ready, then for nginx's
// fail_timeout, after which nginx sends it traffic again.
func (e *env) restart(r *replica) (time.Duration, error) {
	r.wait(40 * time.Second)
	if err := r.start(e.o); err != nil {
		return 0, err
	}
	d, err := r.waitReady(3 * time.Minute)
	if err != nil {
		return 0, err
	}
	log.Printf("replica %d restarted, ready after %.1f s; waiting %d s for nginx's fail_timeout", r.ID, d.Seconds(), e.o.failTimeout+1)
	time.Sleep(time.Duration(e.o.failTimeout+1) * time.Second)
	return d, nil
}

func (res *results) check(ok bool, format string, args ...any) {
	if !ok {
		res.Failures = append(res.Failures, fmt.Sprintf(format, args...))
	}
}

// failover runs n digits requests through all replicas and signals victim a third of the way
// in. With slow > 0 it first queues that many slow-model requests on the victim directly, so
// that there is a queue to drain. With deregister > 0 it first takes the victim out of the
// load balancer and waits that long, as Kubernetes removes a terminating pod from the
// endpoints while its preStop hook sleeps. For SIGTERM it records how the victim drained.
func (e *env) failover(victim *replica, sig syscall.Signal, n, slow int, deregister time.Duration) (*failover, error) {
	o := e.o
	f := &failover{Signal: sig.String(), Requests: n, Victim: fmt.Sprintf("replica-%d", victim.ID),
		Statuses: map[int]int{}, ByReplica: map[string]int{}, RetriedUpstreamStatus: map[string]int{},
		DeregisteredFirst: deregister.Seconds()}
	k := len(e.replicas)
	off := e.lb.logOffset()
	errOff := fileSize(filepath.Join(e.lb.dir, "nginx-error.log"))
	before, err := victim.metrics()
	if err != nil {
		return nil, err
	}
	type abOut struct {
		r    *abResult
		text string
		err  error
	}
	abDone := make(chan abOut, 1)
	// Taking the victim out of the pool reloads nginx, whose old worker then closes its idle
	// keep-alive connections from ab: a client-side race that removing a pod from a
	// Service's endpoints does not cause. That run's clients open a connection per request.
	keepAlive := deregister == 0
	go func() {
		r, text, err := runABWith(keepAlive, e.poolURL(k, "/predictions/digits"), o.image, "image/png", o.concurrency, n, 0)
		abDone <- abOut{r, text, err}
	}()
	deadline := time.Now().Add(2 * time.Minute)
	for e.lb.countSince(off) < n/3 {
		if time.Now().After(deadline) {
			return nil, errors.New("ab made no progress")
		}
		time.Sleep(10 * time.Millisecond)
	}

	var slowDone chan int
	if sig == syscall.SIGTERM {
		f.Drain = &drain{Slow: slow, SlowStatuses: map[int]int{}}
	}
	if slow > 0 {
		slowDone = make(chan int, slow)
		slowClient := *client
		slowClient.Timeout = 2 * time.Minute
		for range slow {
			go func() {
				resp, err := slowClient.Post(victim.InferenceURL()+"/predictions/slow", "application/json", strings.NewReader("[[250, 0]]"))
				if err != nil {
					slowDone <- 0
					return
				}
				resp.Body.Close()
				slowDone <- resp.StatusCode
			}()
		}
		// SIGTERM once half of them wait in the queue behind the batch being computed (or
		// after 5 s with however many do).
		for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
			m, err := victim.metrics()
			if err != nil {
				continue
			}
			q := sumSeries(m, "torchd_queue_depth", `model="slow"`)
			if q >= f.Drain.QueueDepthAtSignal {
				f.Drain.QueueDepthAtSignal = q
				f.Drain.DigitsQueueAtSignal = sumSeries(m, "torchd_queue_depth", `model="digits"`)
			}
			if q >= float64(slow/2) {
				break
			}
		}
	}
	if last, err := victim.metrics(); err == nil {
		f.VictimAnsweredBefore = sumSeries(last, "torchd_requests_total", `model="digits"`, `code="200"`) -
			sumSeries(before, "torchd_requests_total", `model="digits"`, `code="200"`)
	}
	if deregister > 0 {
		var rest []string
		for _, r := range e.replicas {
			if r != victim {
				rest = append(rest, r.Addr())
			}
		}
		if err := e.lb.reload(k-1, rest); err != nil {
			return nil, err
		}
		log.Printf("%s taken out of the load balancer; SIGTERM in %v", f.Victim, deregister)
		time.Sleep(deregister)
	}
	f.LinesAtSignal = e.lb.countSince(off)
	signalled := time.Now()
	if err := victim.signal(sig); err != nil {
		return nil, err
	}
	log.Printf("%v sent to %s after %d of %d requests", sig, f.Victim, f.LinesAtSignal, n)

	if sig == syscall.SIGTERM {
		dr := f.Drain
		for range slow {
			st := <-slowDone
			dr.SlowStatuses[st]++
			if st == 200 {
				dr.SlowOK++
			}
		}
		dr.Exited = victim.wait(45 * time.Second)
		dr.ExitSeconds = time.Since(signalled).Seconds()
		if dr.Exited {
			dr.ExitCode = exitCode(victim.exitErr)
		}
		if err := dr.readLog(victim.logPath); err != nil {
			return nil, err
		}
		log.Printf("replica %d: queue %g (slow) + %g (digits) at SIGTERM; %d answers after it (%d slow); exited %v, code %d, %.1f s after the signal",
			victim.ID, dr.QueueDepthAtSignal, dr.DigitsQueueAtSignal, dr.AnsweredAfterSignal, dr.SlowAnsweredAfterSignal, dr.Exited, dr.ExitCode, dr.ExitSeconds)
	} else {
		victim.wait(10 * time.Second)
	}

	out := <-abDone
	if out.err != nil {
		return nil, out.err
	}
	os.WriteFile(filepath.Join(o.out, fmt.Sprintf("ab-failover-%s-%s.txt", f.Victim, strings.ReplaceAll(sig.String(), " ", "-"))), []byte(out.text), 0o644)
	f.AB = out.r
	lines, err := e.lb.linesSince(off, e.ports[k-1])
	if err != nil {
		return nil, err
	}
	f.LBAccepted = len(lines)
	f.Accepted = len(lines)
	for _, l := range lines {
		f.Statuses[l.Status]++
		if l.Status == 200 {
			f.ByReplica[e.replicaName(l.Final())]++
		}
		if l.Retried() {
			f.Retried++
			f.RetriedUpstreamStatus[l.UpStatus]++
			if e.replicaName(l.Upstreams[0]) != f.Victim {
				f.RetriedFromOthers++
			}
		}
	}
	f.Lost = f.Accepted - f.Statuses[200]
	if f.Drain != nil {
		f.Accepted += f.Drain.Slow
		f.Lost += f.Drain.Slow - f.Drain.SlowOK
	}
	f.NginxErrors = nginxErrors(filepath.Join(e.lb.dir, "nginx-error.log"), errOff)
	log.Printf("%v run: ab complete %d, failed %d, non-2xx %d; nginx answered %v, retried %d %v; by replica %v",
		sig, f.AB.Complete, f.AB.Failed, f.AB.Non2xx, f.Statuses, f.Retried, f.RetriedUpstreamStatus, f.ByReplica)
	return f, nil
}

func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

func fileSize(p string) int64 {
	fi, err := os.Stat(p)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// nginxErrors counts the error log's upstream failures since offset by their cause.
func nginxErrors(path string, offset int64) map[string]int {
	out := map[string]int{}
	b, err := os.ReadFile(path)
	if err != nil || int64(len(b)) < offset {
		return out
	}
	causes := []string{"Connection refused", "Connection reset by peer", "upstream prematurely closed connection",
		"no live upstreams", "upstream timed out", "is marked as failed"}
	for _, line := range strings.Split(string(b[offset:]), "\n") {
		for _, c := range causes {
			if strings.Contains(line, c) {
				out[c]++
			}
		}
	}
	return out
}

// readLog reads the drained replica's log from its last start: torchd logs
// "shutting down: draining accepted requests" on SIGTERM, an access line per answer, and
// "stopped" once every accepted request is answered.
func (d *drain) readLog(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	text := string(b)
	if i := strings.LastIndex(text, "=== scaletest: start"); i >= 0 {
		text = text[i:]
	}
	lines := strings.Split(text, "\n")
	shut, stopped, lastAnswer := -1, -1, -1
	for i, l := range lines {
		switch {
		case strings.Contains(l, `msg="shutting down: draining accepted requests"`):
			shut = i
			d.ShutdownLine = l
		case strings.Contains(l, "msg=stopped"):
			stopped = i
			d.StoppedLine = l
		case shut >= 0 && strings.Contains(l, "msg=access") && strings.Contains(l, "status=200"):
			d.AnsweredAfterSignal++
			lastAnswer = i
			if strings.Contains(l, "path=/predictions/slow") {
				d.SlowAnsweredAfterSignal++
			}
		}
	}
	d.LogShuttingDown = shut >= 0
	d.LogStopped = stopped > shut && shut >= 0
	d.LastAnswerBeforeStopped = lastAnswer >= 0 && lastAnswer < stopped
	return nil
}

func (o *options) summary() map[string]any {
	return map[string]any{
		"replicas": o.replicas, "cpus_per_replica": o.cpus, "threads": o.threads, "workers": 1,
		"models": o.models, "duration_s": o.duration.Seconds(), "concurrency": o.concurrency,
		"rounds": o.rounds, "nginx_fail_timeout_s": o.failTimeout, "slow_requests": o.slow,
		"image": filepath.Base(o.image),
	}
}

func sortedKeys[M ~map[string]V, V any](m M) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func writeResults(o *options, res *results) {
	b, _ := json.MarshalIndent(res, "", "  ")
	os.WriteFile(filepath.Join(o.out, "results.json"), append(b, '\n'), 0o644)
	md := res.markdown()
	os.WriteFile(filepath.Join(o.out, "summary.md"), []byte(md), 0o644)
	fmt.Print(md)
}
