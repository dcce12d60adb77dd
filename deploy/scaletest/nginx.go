package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/template"
	"time"
)

// The load balancer: one nginx in the root namespace, with one listener per pool size (the
// first 1, 2 or 3 replicas), so that the scaling runs need no reload.
//
// Retry policy. A request is passed to the next replica on a connection-level failure
// (refused, reset, closed before the response header: `error`) or a connect timeout
// (`timeout`; the read timeout is longer than torchd's response_timeout, so a slow inference
// is never sent twice). nginx does not retry a POST once it has been sent unless told so
// (`non_idempotent`); inference has no side effects, so a request a dying replica took is
// safe to run again, at the cost of computing it twice. A 503 from torchd (its queue is full)
// is not retried: it is torchd shedding load, with Retry-After, and retrying it would move
// the overload onto the next replica and multiply it by the retry budget. Tries are bounded.
//
// Passive health checks: one failure takes a replica out for fail_timeout, after which
// nginx tries it again with live traffic.
const nginxConf = `# Written by deploy/scaletest; see nginx.go for the policy.
worker_processes 1;
user root root;
pid {{.Dir}}/nginx.pid;
error_log {{.Dir}}/nginx-error.log info;
events { worker_connections 4096; }
http {
    client_body_temp_path {{.Dir}}/tmp/body;
    proxy_temp_path {{.Dir}}/tmp/proxy;
    fastcgi_temp_path {{.Dir}}/tmp/fastcgi;
    uwsgi_temp_path {{.Dir}}/tmp/uwsgi;
    scgi_temp_path {{.Dir}}/tmp/scgi;
    # msec, listener, status, then every upstream tried, in order, with its status: more
    # than one address is a retry.
    log_format scale '$msec $server_port $status "$upstream_addr" "$upstream_status" $request_time';
    access_log {{.Dir}}/nginx-access.log scale;
    keepalive_requests 1000000;
    client_max_body_size 8m;
{{range $i, $pool := .Pools}}
    upstream pool{{$i}} {
{{- range $pool}}
        server {{.}} max_fails=1 fail_timeout={{$.FailTimeout}}s;
{{- end}}
        keepalive 64;
    }
    server {
        listen 127.0.0.1:{{index $.Ports $i}};
        location / {
            proxy_pass http://pool{{$i}};
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_next_upstream error timeout non_idempotent;
            proxy_next_upstream_tries 3;
            proxy_next_upstream_timeout 10s;
            proxy_connect_timeout 1s;
            proxy_read_timeout 130s;
            proxy_send_timeout 30s;
        }
    }
{{end}}
}
`

type nginx struct {
	dir         string
	failTimeout int
	Ports       []int
	Pools       [][]string
	cmd         *exec.Cmd
	accessLog   string
}

// startNginx writes the configuration for pools (each a list of replica addresses) and
// starts nginx in the foreground; pool i listens on 127.0.0.1:ports[i].
func startNginx(dir string, pools [][]string, ports []int, failTimeout int) (*nginx, error) {
	n := &nginx{dir: dir, Ports: ports, Pools: pools, accessLog: filepath.Join(dir, "nginx-access.log")}
	if err := os.MkdirAll(filepath.Join(dir, "tmp"), 0o755); err != nil {
		return nil, err
	}
	n.failTimeout = failTimeout
	if err := n.writeConf(); err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "nginx.conf")
	if out, err := exec.Command("nginx", "-t", "-p", dir, "-c", conf).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("nginx -t: %v: %s", err, out)
	}
	n.cmd = exec.Command("nginx", "-p", dir, "-c", conf, "-g", "daemon off;")
	errf, err := os.Create(filepath.Join(dir, "nginx-stderr.log"))
	if err != nil {
		return nil, err
	}
	n.cmd.Stdout, n.cmd.Stderr = errf, errf
	if err := n.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { n.cmd.Wait(); errf.Close() }()
	for range 50 {
		if c, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d/ping", ports[0])); err == nil {
			c.Body.Close()
			return n, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	n.stop()
	return nil, fmt.Errorf("nginx did not start; see %s", dir)
}

// reload rewrites the configuration with pool i (0-based) set to addrs and has nginx load
// it: new workers take new requests, old ones finish theirs.
func (n *nginx) reload(i int, addrs []string) error {
	n.Pools[i] = addrs
	if err := n.writeConf(); err != nil {
		return err
	}
	return n.cmd.Process.Signal(syscall.SIGHUP)
}

func (n *nginx) stop() {
	if n == nil || n.cmd == nil || n.cmd.Process == nil {
		return
	}
	n.cmd.Process.Signal(syscall.SIGQUIT) // graceful: finish what is in flight
	for range 50 {
		if n.cmd.ProcessState != nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	n.cmd.Process.Kill()
}

func (n *nginx) writeConf() error {
	f, err := os.Create(filepath.Join(n.dir, "nginx.conf"))
	if err != nil {
		return err
	}
	defer f.Close()
	return template.Must(template.New("nginx").Parse(nginxConf)).Execute(f, map[string]any{
		"Dir": n.dir, "Pools": n.Pools, "Ports": n.Ports, "FailTimeout": n.failTimeout,
	})
}

// cpuSeconds adds up the master's and its workers' CPU time.
func (n *nginx) cpuSeconds() float64 {
	pid := n.cmd.Process.Pid
	total := cpuSeconds(pid)
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", child))
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			total += cpuSeconds(child)
		}
	}
	return total
}

// logOffset is where the next access-log line will start.
func (n *nginx) logOffset() int64 {
	fi, err := os.Stat(n.accessLog)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// logLine is one access-log line.
type logLine struct {
	Time      float64
	Port      int
	Status    int
	Upstreams []string // every replica tried, in order
	UpStatus  string
}

// Retried reports whether nginx passed the request to more than one replica.
func (l logLine) Retried() bool { return len(l.Upstreams) > 1 }

// Final is the replica that answered.
func (l logLine) Final() string { return l.Upstreams[len(l.Upstreams)-1] }

// linesSince reads the access log from offset, for the listener port (0: all).
func (n *nginx) linesSince(offset int64, port int) ([]logLine, error) {
	f, err := os.Open(n.accessLog)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return nil, err
	}
	var out []logLine
	s := bufio.NewScanner(f)
	for s.Scan() {
		l, ok := parseLogLine(s.Text())
		if ok && (port == 0 || l.Port == port) {
			out = append(out, l)
		}
	}
	return out, s.Err()
}

// countSince counts the lines written since offset, cheaply, while a run is going.
func (n *nginx) countSince(offset int64) int {
	f, err := os.Open(n.accessLog)
	if err != nil {
		return 0
	}
	defer f.Close()
	f.Seek(offset, io.SeekStart)
	b, _ := io.ReadAll(f)
	return strings.Count(string(b), "\n")
}

func parseLogLine(s string) (logLine, bool) {
	// 1790000000.123 18183 200 "10.213.1.2:8080, 10.213.2.2:8080" "502, 200" 0.004
	var l logLine
	parts := strings.Split(s, `"`)
	if len(parts) < 5 {
		return l, false
	}
	head := strings.Fields(parts[0])
	if len(head) < 3 {
		return l, false
	}
	l.Time, _ = strconv.ParseFloat(head[0], 64)
	l.Port, _ = strconv.Atoi(head[1])
	l.Status, _ = strconv.Atoi(head[2])
	// Replicas tried within one upstream block are separated by ", ".
	for _, a := range strings.Split(parts[1], ",") {
		if a = strings.TrimSpace(a); a != "" && a != "-" {
			l.Upstreams = append(l.Upstreams, a)
		}
	}
	if len(l.Upstreams) == 0 {
		l.Upstreams = []string{"-"}
	}
	l.UpStatus = parts[3]
	return l, true
}
