package main

import (
	"os"
	"os/exec"
	"reflect"
	"strings"
	"testing"
)

// What torchd sets before libgomp loads: PASSIVE when the user set no policy (a spin count of
// the user's is left to be inherited beside it), and nothing at all when the user chose one.
func TestOpenMPEnvPrecedence(t *testing.T) {
	for _, c := range []struct {
		name string
		env  map[string]string
		want map[string]string
	}{
		{"neither", nil, map[string]string{"OMP_WAIT_POLICY": "PASSIVE"}},
		{"user spin", map[string]string{"GOMP_SPINCOUNT": "0"}, map[string]string{"OMP_WAIT_POLICY": "PASSIVE"}},
		{"user passive", map[string]string{"OMP_WAIT_POLICY": "PASSIVE"}, nil},
		{"user active", map[string]string{"OMP_WAIT_POLICY": "active"}, nil},
		{"user policy and spin", map[string]string{"OMP_WAIT_POLICY": "ACTIVE", "GOMP_SPINCOUNT": "10"}, nil},
	} {
		got := openMPEnv(func(k string) string { return c.env[k] })
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: environment %v: torchd sets %v, want %v", c.name, c.env, got, c.want)
		}
	}
}

// The re-exec itself: this test binary runs itself as a child whose openMPWait restarts it,
// and the restarted child reports the variables it started with.
func TestOpenMPWaitReexec(t *testing.T) {
	if os.Getenv("TORCHD_OMP_CHILD") == "1" {
		if os.Getenv("TORCHD_OMP_REEXECED") == "" {
			os.Setenv("TORCHD_OMP_REEXECED", "1")
			openMPWait()
			if openMPEnv(os.Getenv) != nil {
				t.Fatal("openMPWait returned without setting the wait policy")
			}
		}
		os.Stdout.WriteString("policy=" + os.Getenv("OMP_WAIT_POLICY") + " spin=" + os.Getenv("GOMP_SPINCOUNT") + "\n")
		return
	}
	for _, c := range []struct {
		env  []string
		want string
	}{
		{nil, "policy=PASSIVE spin="},
		{[]string{"GOMP_SPINCOUNT=300"}, "policy=PASSIVE spin=300"},
		{[]string{"OMP_WAIT_POLICY=ACTIVE"}, "policy=ACTIVE spin="},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestOpenMPWaitReexec$", "-test.count=1")
		for _, e := range os.Environ() {
			if !strings.HasPrefix(e, "OMP_WAIT_POLICY=") && !strings.HasPrefix(e, "GOMP_SPINCOUNT=") &&
				!strings.HasPrefix(e, "TORCHD_OMP_") {
				cmd.Env = append(cmd.Env, e)
			}
		}
		cmd.Env = append(append(cmd.Env, "TORCHD_OMP_CHILD=1"), c.env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("environment %v: child: %v\n%s", c.env, err, out)
		}
		if !strings.Contains(string(out), c.want+"\n") {
			t.Errorf("environment %v: child started with %q, want %q", c.env, out, c.want)
		}
	}
}
