package main

import (
	"fmt"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"
)

// results is everything a run measured; it is written as results.json and summary.md.
type results struct {
	Started, Finished   time.Time
	Options             map[string]any
	Host                map[string]string
	Isolation, CPULimit string
	StealSeconds        float64  // CPU time the hypervisor gave to others during the run
	LoadAvg             []string // /proc/loadavg at the start and at the end: other work on the host

	ReadySeconds        []float64 // start to /ping 200, per replica
	Direct              *abResult // replica 1 without the load balancer
	Scaling             []*scaleRun
	Unloaded            *scaleRun // ResNet-18, one replica, one request at a time
	Kill                *failover
	RestartReadySeconds float64
	Term                *failover
	Deregistered        *failover // SIGTERM after the replica left the load balancer

	Failures []string
}

// scaleRun is one throughput run of a model through the pool of the first Replicas replicas.
type scaleRun struct {
	Model                 string
	Replicas, Round       int
	Concurrency           int
	AB                    *abResult
	TorchdCPUPerRequestUS float64 // CPU time per answered request: all replicas together
	NginxCPUPerRequestUS  float64
	ABCPUPerRequestUS     float64
	MeanBatch             float64        // images per forward
	ForwardMSPerImage     float64        // forward time / images
	PreprocessMS          float64        // decode and transform, per request, in its goroutine
	QueueMS               float64        // mean time in the model's queue
	RSSMiB                []float64      // resident memory of each replica after the run
	Shares                map[string]int // 200 answers per replica, from nginx's log
	Statuses              map[int]int    // 499: requests ab abandoned when its time ran out
	ReplicaCPU            []float64      // CPU seconds each replica used during the run
	ThrottledSeconds      []float64      // time each replica's cgroup spent throttled
	NginxCPU              float64
}

// failover is one run during which a replica was signalled.
type failover struct {
	Signal, Victim        string
	Requests              int
	DeregisteredFirst     float64 // seconds between leaving the load balancer and the signal; 0: not removed
	AB                    *abResult
	LinesAtSignal         int     // requests nginx had answered when the signal went
	VictimAnsweredBefore  float64 // digits answers of the victim during the run, before it
	LBAccepted            int     // requests nginx accepted (lines in its access log)
	Accepted              int     // LBAccepted + the slow ones sent straight to the victim
	Lost                  int     // accepted and not answered 200
	Statuses              map[int]int
	ByReplica             map[string]int
	Retried               int            // requests nginx passed to more than one replica
	RetriedFromOthers     int            // of them, first tried on a replica other than the victim
	RetriedUpstreamStatus map[string]int // $upstream_status of the retried requests
	NginxErrors           map[string]int // causes in nginx's error log
	Drain                 *drain         `json:",omitempty"`
}

// drain is what the SIGTERMed replica did between the signal and its exit.
type drain struct {
	Slow                    int // slow-model requests sent to it just before SIGTERM
	SlowOK                  int
	SlowStatuses            map[int]int
	QueueDepthAtSignal      float64 // torchd_queue_depth{model="slow"} just before SIGTERM
	DigitsQueueAtSignal     float64
	AnsweredAfterSignal     int // access lines with status 200 after "shutting down"
	SlowAnsweredAfterSignal int
	Exited                  bool
	ExitCode                int
	ExitSeconds             float64 // from SIGTERM to exit
	LogShuttingDown         bool
	LogStopped              bool
	LastAnswerBeforeStopped bool
	ShutdownLine            string
	StoppedLine             string
}

func hostInfo() map[string]string {
	h := map[string]string{"cpus": strconv.Itoa(runtime.NumCPU())}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "model name") {
				_, v, _ := strings.Cut(l, ":")
				h["cpu"] = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		h["kernel"] = strings.TrimSpace(string(b))
	}
	return h
}

// stealSeconds reads the machine's total steal time from /proc/stat.
func stealSeconds() float64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	f := strings.Fields(strings.SplitN(string(b), "\n", 2)[0])
	if len(f) < 9 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[8], 64)
	return v / 100
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func (res *results) markdown() string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("# Scale-out run, %s\n\n", res.Started.Format(time.RFC3339))
	p("Host: %s × %s, kernel %s. Replicas: %s; %s. Steal during the run: %.1f s.\n\n",
		res.Host["cpus"], res.Host["cpu"], res.Host["kernel"], res.Isolation, res.CPULimit, res.StealSeconds)
	p("Load average (1, 5, 15 min) at the start: %s; at the end: %s.\n\n", at(res.LoadAvg, 0), at(res.LoadAvg, 1))
	p("Options: %v\n\n", res.Options)
	p("Replicas ready (start → /ping 200): %s s\n\n", floats(res.ReadySeconds, 1))
	if res.Direct != nil {
		p("Digits straight to replica 1, no load balancer, c=%d: %.0f req/s, p50 %d ms, p99 %d ms.\n\n", res.Direct.Concurrency, res.Direct.RPS, res.Direct.P50, res.Direct.P99)
	}
	for _, model := range []string{"digits", "resnet18"} {
		byK := map[int][]float64{}
		first := true
		for _, s := range res.Scaling {
			if s.Model != model {
				continue
			}
			if first {
				p("## Throughput: %s (ab -k -c %d through nginx)\n\n", model, s.Concurrency)
				p("| Replicas | Round | req/s | p50 ms | p99 ms | 200s per replica | replica CPU s | throttled s | CPU µs/req torchd | nginx | ab | batch | forward ms/img | preprocess ms | queue ms |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
				first = false
			}
			byK[s.Replicas] = append(byK[s.Replicas], s.AB.RPS)
			var shares []string
			for _, k := range sortedKeys(s.Shares) {
				shares = append(shares, fmt.Sprintf("%s: %d", strings.TrimPrefix(k, "replica-"), s.Shares[k]))
			}
			p("| %d | %d | %.1f | %d | %d | %s | %s | %s | %.0f | %.0f | %.0f | %.1f | %.2f | %.2f | %.1f |\n", s.Replicas, s.Round, s.AB.RPS, s.AB.P50, s.AB.P99,
				strings.Join(shares, ", "), floats(s.ReplicaCPU[:s.Replicas], 1), floats(s.ThrottledSeconds[:s.Replicas], 1),
				s.TorchdCPUPerRequestUS, s.NginxCPUPerRequestUS, s.ABCPUPerRequestUS, s.MeanBatch, s.ForwardMSPerImage, s.PreprocessMS, s.QueueMS)
		}
		if first {
			continue
		}
		p("\nResident memory per replica after the last run: %s MiB.\n", floats(res.Scaling[len(res.Scaling)-1].RSSMiB, 0))
		p("\nMedian req/s by replicas:")
		for k := 1; k <= len(byK); k++ {
			p(" %d → %.1f (×%.2f);", k, median(byK[k]), median(byK[k])/median(byK[1]))
		}
		p("\n\n")
	}
	if u := res.Unloaded; u != nil {
		p("ResNet-18 one request at a time (c=1, one replica): %.1f req/s, p50 %d ms; preprocess %.1f ms, forward %.1f ms per image (batch %.1f); torchd CPU %.1f ms per request.\n\n",
			u.AB.RPS, u.AB.P50, u.PreprocessMS, u.ForwardMSPerImage, u.MeanBatch, u.TorchdCPUPerRequestUS/1e3)
	}
	for _, f := range []*failover{res.Kill, res.Term, res.Deregistered} {
		if f == nil {
			continue
		}
		p("## %s %s during %d requests (signal after %d)\n\n", f.Signal, f.Victim, f.Requests, f.LinesAtSignal)
		if f.DeregisteredFirst > 0 {
			p("Taken out of nginx's upstream (reload) %g s before the signal, as Kubernetes removes a terminating pod from the endpoints during preStop.\n\n", f.DeregisteredFirst)
		}
		p("- ab (keep-alive %v): complete %d, failed %d, non-2xx %d, %.0f req/s, p99 %d ms, longest %d ms\n", f.AB.KeepAlive, f.AB.Complete, f.AB.Failed, f.AB.Non2xx, f.AB.RPS, f.AB.P99, f.AB.MaxMS)
		p("- accepted %d, lost %d; nginx statuses %v; answered by %v\n", f.Accepted, f.Lost, f.Statuses, f.ByReplica)
		p("- retried by nginx: %d (upstream statuses %v; %d first tried elsewhere than %s); error log: %v\n", f.Retried, f.RetriedUpstreamStatus, f.RetriedFromOthers, f.Victim, f.NginxErrors)
		p("- %s answered %.0f digits requests in this run before the signal\n", f.Victim, f.VictimAnsweredBefore)
		if d := f.Drain; d != nil {
			p("- drain: queue at SIGTERM %g slow + %g digits; %d/%d slow requests 200 (%d answered after SIGTERM); %d answers after SIGTERM in all; exit code %d %.1f s after the signal\n",
				d.QueueDepthAtSignal, d.DigitsQueueAtSignal, d.SlowOK, d.Slow, d.SlowAnsweredAfterSignal, d.AnsweredAfterSignal, d.ExitCode, d.ExitSeconds)
			p("- log: `%s` … `%s`\n", d.ShutdownLine, d.StoppedLine)
		}
		p("\n")
	}
	if res.RestartReadySeconds > 0 {
		p("Replica 1 restarted after SIGKILL: ready after %.1f s.\n\n", res.RestartReadySeconds)
	}
	if len(res.Failures) == 0 {
		p("All assertions passed.\n")
	} else {
		p("FAILED:\n")
		for _, f := range res.Failures {
			p("- %s\n", f)
		}
	}
	return b.String()
}

func floats(xs []float64, prec int) string {
	var s []string
	for _, x := range xs {
		s = append(s, strconv.FormatFloat(x, 'f', prec, 64))
	}
	return strings.Join(s, ", ")
}

func at(xs []string, i int) string {
	if i < len(xs) {
		return xs[i]
	}
	return "?"
}

func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
