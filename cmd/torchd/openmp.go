package main

import (
	"os"
	"syscall"
)

// defaultSpinCount is GOMP_SPINCOUNT when neither it nor OMP_WAIT_POLICY is set: a team thread
// spins this many rounds at a barrier (well under a millisecond) and then sleeps. It takes back
// most of what sleeping at once costs a small forward on two or more threads, and is too short
// to starve the HTTP goroutines that share the cores (docs/design/openmp.md has the figures).
const defaultSpinCount = "2000"

// openMPEnv returns the variables torchd sets before libgomp loads, given the environment's.
// A user's OMP_WAIT_POLICY wins outright (set alone, PASSIVE means no spin at all); a user's
// GOMP_SPINCOUNT is kept beside torchd's PASSIVE.
func openMPEnv(getenv func(string) string) map[string]string {
	if getenv("OMP_WAIT_POLICY") != "" {
		return nil
	}
	set := map[string]string{"OMP_WAIT_POLICY": "PASSIVE"}
	if getenv("GOMP_SPINCOUNT") == "" {
		set["GOMP_SPINCOUNT"] = defaultSpinCount
	}
	return set
}

// openMPWait restarts the process once with openMPEnv's variables. LibTorch (and the MKL
// inside it) runs on GNU OpenMP, whose threads by default spin for milliseconds at a barrier;
// in a server the same cores run the HTTP goroutines (and, on shared machines, other
// processes), and long spins take the cores from them, while sleeping at once slows small
// forwards. libgomp reads the variables once, as the process loads it, before main runs, so
// setting them needs a fresh exec.
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
