package main

import (
	"os"
	"os/exec"
	"runtime"
	"strings"
)

// machine describes where the run happened.
type machine struct {
	CPU, Kernel, OS, Go, AB, Wrk, Python, Torch string
	Cores                                       int
	MemGiB                                      float64
	LoadAvg                                     string // at the start: other tenants' work
}

func describeMachine(cfg *config) machine {
	m := machine{Cores: runtime.NumCPU(), Go: runtime.Version()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "model name"); ok {
				m.CPU = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	if kb := statusKBFile("/proc/meminfo", "MemTotal"); kb > 0 {
		m.MemGiB = float64(kb) / (1 << 20)
	}
	m.Kernel = firstLine(exec.Command("uname", "-r").Output())
	if b, err := os.ReadFile("/etc/os-release"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "PRETTY_NAME="); ok {
				m.OS = strings.Trim(v, `"`)
			}
		}
	}
	m.AB = strings.TrimPrefix(strings.ReplaceAll(firstLine(exec.Command("ab", "-V").Output()), " <$Revision$>", ""), "This is ")
	m.Wrk, _, _ = strings.Cut(firstLine(exec.Command("wrk", "-v").CombinedOutput()), " Copyright")
	m.Python = firstLine(exec.Command(cfg.python, "-c", "import sys, torch, torchvision, PIL; print(sys.version.split()[0], 'torch', torch.__version__, 'torchvision', torchvision.__version__, 'Pillow', PIL.__version__)").Output())
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		f := strings.Fields(string(b))
		if len(f) >= 3 {
			m.LoadAvg = strings.Join(f[:3], " ")
		}
	}
	return m
}

func statusKBFile(path, key string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, key+":"); ok {
			var n int64
			for _, c := range strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")) {
				if c < '0' || c > '9' {
					break
				}
				n = n*10 + int64(c-'0')
			}
			return n
		}
	}
	return 0
}

func firstLine(b []byte, err error) string {
	if err != nil && len(b) == 0 {
		return "?"
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	return strings.TrimSpace(line)
}
