package daemon_test

import (
	"bufio"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/torchd/torchd/daemon"
)

// The attacks of the reliability issue that are not about one decoder: each sends the
// attack and asserts the outcome. docs/guide/attacks.md lists them with what held.

// answerBound bounds a call that must answer at all. The issue asks for "within a second";
// a loaded 2-core CI machine gets a generous bound, which a hang still never meets.
const answerBound = 10 * time.Second

// zerosJSON is one 1×28×28 input for digits_tensor.
var zerosJSON = repeatJSON(repeatJSON(repeatJSON(repeatJSON("0", 28), 28), 1), 1)

// kill -9 then an immediate restart: the dead process is a zombie, which kill(pid, 0) still
// reports alive (the old liveness check), yet its extraction directories are swept,
// because its lock is gone.
func TestSweepAfterKillRaces(t *testing.T) {
	tmp := t.TempDir()
	// sh starts torchd, then becomes a sleep that never reaps it: killed, torchd stays a
	// zombie, as a process does while its parent has not yet waited for it.
	sh := exec.Command("sh", "-c", `"$0" serve --model-store "$1" --models digits=digits.mar --inference-address 127.0.0.1:0 --management-address 127.0.0.1:0 --metrics-address 127.0.0.1:0 --grpc-address= --grpc-inference-address= --grpc-management-address= --enable-snapshots=false 2>/dev/null & echo $!; exec sleep 600`,
		torchdBin, store)
	sh.Env = append(os.Environ(), "TMPDIR="+tmp)
	out, err := sh.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sh.Process.Kill(); sh.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatal(err)
	}
	prefix := fmt.Sprintf("torchd-%d-model-", pid)
	waitFor(t, 60*time.Second, "the extraction directory", func() bool { return len(entriesWith(t, tmp, prefix)) == 1 })
	syscall.Kill(pid, syscall.SIGKILL)
	waitFor(t, answerBound, "the killed torchd to become a zombie", func() bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		return err == nil && strings.Contains(string(b), ") Z ")
	})
	t.Setenv("TMPDIR", tmp)
	// The lock goes when the last of the dying process's threads has exited, a moment
	// after the leader shows as a zombie; the daemon sweeps again while a lock is held.
	var removed []string
	waitFor(t, answerBound, "the sweep to take the dead process's lock", func() bool {
		r, _ := daemon.SweepTemp()
		removed = append(removed, r...)
		return len(removed) > 0
	})
	if len(removed) != 1 || !strings.HasPrefix(removed[0], prefix) {
		t.Fatalf("sweep removed %v; want the zombie's one directory", removed)
	}
	if syscall.Kill(pid, 0) != nil {
		t.Fatal("the zombie was reaped: kill(pid, 0) alone would have told this case apart")
	}
	if left := entriesWith(t, tmp, "torchd-"); len(left) != 0 {
		t.Fatalf("TMPDIR still holds %v", left)
	}
}

// A live torchd's directories are kept by the sweep of another process.
func TestSweepKeepsLive(t *testing.T) {
	tmp := t.TempDir()
	s := startServerIn(t, tmp, "--models", "digits=digits.mar")
	s.waitHealthy(t)
	t.Setenv("TMPDIR", tmp)
	removed, held := daemon.SweepTemp()
	if len(removed) != 0 || len(held) != 1 || held[0] != s.Cmd.Process.Pid {
		t.Fatalf("sweep of a live server's TMPDIR removed %v, held %v", removed, held)
	}
	if got := s.tmpEntries(t); len(got) != 1 {
		t.Fatalf("TMPDIR holds %v", got)
	}
}

// Where TMPDIR is too long for a socket's path, handler sockets go under /tmp; a dead
// process's are swept from there too.
func TestSweepLongTempDir(t *testing.T) {
	long := filepath.Join(t.TempDir(), strings.Repeat("d", 100))
	if err := os.Mkdir(long, 0o700); err != nil {
		t.Fatal(err)
	}
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join("/tmp", fmt.Sprintf("torchd-%d-handler-1", gone.Process.Pid))
	if err := os.Mkdir(stale, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(stale) })
	t.Setenv("TMPDIR", long)
	removed, _ := daemon.SweepTemp()
	if !slices.Contains(removed, filepath.Base(stale)) {
		t.Fatalf("sweep removed %v; want %s among them", removed, filepath.Base(stale))
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Fatalf("%s is still there (%v)", stale, err)
	}
}

func entriesWith(t *testing.T, dir, prefix string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix) {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	return out
}

// waitFor polls cond until it holds or bound passes.
func waitFor(t *testing.T, bound time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", bound, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// allowed_urls cannot be escaped with .., encoded or not, or with a symbolic link, and a
// refused URL and a missing file get the same answer.
func TestAllowedURLsEscape(t *testing.T) {
	root := t.TempDir()
	allowedDir, outside := filepath.Join(root, "store"), filepath.Join(root, "outside")
	for _, d := range []string{allowedDir, outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mar, err := os.ReadFile(filepath.Join(store, "digits.mar"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(allowedDir, "digits.mar"), filepath.Join(outside, "x.mar")} {
		if err := os.WriteFile(p, mar, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(outside, "x.mar"), filepath.Join(allowedDir, "link.mar")); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, "--allowed-urls", "file://"+regexp.QuoteMeta(allowedDir)+"/.*")
	register := func(u string) response {
		return do(t, "POST", s.mgmt+"/models?initial_workers=1&url="+url.QueryEscape(u), "", nil)
	}
	for _, u := range []string{
		"file://" + allowedDir + "/../outside/x.mar",
		"file://" + allowedDir + "/%2e%2e/outside/x.mar",
		"file://" + allowedDir + "/%2E%2E/outside/x.mar",
		"file://" + allowedDir + "/./../outside/x.mar",
		"file://" + allowedDir + "/link.mar",
		"file://" + allowedDir + "/absent.mar",
		"file:///etc/passwd",
		"file://" + allowedDir + "/../../../../etc/passwd",
	} {
		r := register(u)
		errorShape(t, r, 400, "ModelException", "url "+u+" is not allowed or not found: it must be in the model store or match allowed_urls")
	}
	if r := register("file://" + allowedDir + "/digits.mar"); r.status != 200 {
		t.Fatalf("an allowed URL: %d %s", r.status, r.body)
	}
	var list struct{ Models []struct{ ModelName string } }
	do(t, "GET", s.mgmt+"/models", "", nil).json(t, &list)
	if len(list.Models) != 1 {
		t.Fatalf("registered %+v, want only the allowed digits", list.Models)
	}
}

// handler= at registration overrides the archive's handler; one torchd does not have fails
// the registration with 500 naming it (TorchServe's status for the failed worker start),
// and leaves nothing registered.
func TestRegisterHandlerOverride(t *testing.T) {
	s := startServer(t, "--python", venvPython(t))
	errorShape(t, do(t, "POST", s.mgmt+"/models?url=digits.mar&handler=nope", "", nil),
		500, "InternalServerException", `handler "nope" given at registration does not exist`)
	// A Python handler is looked for in the archive by TorchServe's worker, which fails to
	// start without it.
	for h, msg := range map[string]string{"my_handler.py": "my_handler'", "module:handle": "No module named 'ts.torch_handler.module:handle'"} {
		errorShape(t, do(t, "POST", s.mgmt+"/models?url=digits.mar&initial_workers=1&synchronous=true&handler="+url.QueryEscape(h), "", nil),
			500, "InternalServerException", msg)
	}
	errorShape(t, do(t, "GET", s.mgmt+"/models/digits", "", nil), 404, "ModelNotFoundException", "")
	// digits.mar names image_classifier; handler=tensor wins, and the model takes tensors.
	s.register(t, "url=digits.mar&handler=tensor&initial_workers=1")
	var desc []struct{ Handler string }
	do(t, "GET", s.mgmt+"/models/digits", "", nil).json(t, &desc)
	if len(desc) != 1 || desc[0].Handler != "tensor" {
		t.Fatalf("describe: %+v, want handler tensor", desc)
	}
	if r := do(t, "POST", s.inf+"/predictions/digits", "application/json", []byte(zerosJSON)); r.status != 200 || strings.Contains(string(r.body), "probability") {
		t.Fatalf("a tensor through the overridden handler: %d %s", r.status, r.body)
	}
	png, _ := heldOut(t)
	if r := do(t, "POST", s.inf+"/predictions/digits", "image/png", png[0]); r.status != 400 {
		t.Fatalf("a PNG to the tensor handler: %d %s, want 400", r.status, r.body)
	}
}
