package main

import (
	"os"
	"syscall"
)

// openMPEnv returns the variables torchd sets before libgomp loads, given the environment's:
// OMP_WAIT_POLICY=PASSIVE unless the user set a policy. A user's GOMP_SPINCOUNT is inherited
// as it is, so GOMP_SPINCOUNT=2000 alone gives PASSIVE with a bounded spin, the faster wait on
// a dedicated machine (docs/design/openmp.md has why it is not the default).
func openMPEnv(getenv func(string) string) map[string]string {
	if getenv("OMP_WAIT_POLICY") != "" {
		return nil
	}
	return map[string]string{"OMP_WAIT_POLICY": "PASSIVE"}
}

// openMPWait restarts the process once with openMPEnv's variables. LibTorch (and the MKL
// inside it) runs on GNU OpenMP, whose threads by default spin for milliseconds at a barrier;
// in a server the same cores run the HTTP goroutines (and, on shared machines, other
// processes), and spinning threads take the cores from them. libgomp reads the variables
// once, as the process loads it, before main runs, so setting them needs a fresh exec.
func openMPWait() {
	set := openMPEnv(os.Getenv)
	if set == nil {
		return
	}
	for k, v := range set {
		os.Setenv(k, v)
	}
	exe, err := os.Executable()
	if err != nil {
		return
	}
	// On success Exec does not return; on failure torchd runs on with libgomp's default wait.
	_ = syscall.Exec(exe, os.Args, os.Environ())
}
