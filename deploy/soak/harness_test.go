package soak_test

import (
	"archive/zip"
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/torchd/torchd/archive"
)

// The tests run the torchd binary, built by TestMain as make builds it, on free ports over a
// store of the zoo's archives (models/out, made by `make models`), as a deployment runs it.
var (
	torchdBin string
	store     string
	zooDir    = filepath.Join("..", "..", "models", "out")
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	tmp, err := os.MkdirTemp("", "torchd-soak-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(tmp)
	torchdBin = filepath.Join(tmp, "torchd")
	build := exec.Command("go", "build", "-o", torchdBin, "../../cmd/torchd")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building torchd:", err)
		return 1
	}
	store = filepath.Join(tmp, "store")
	if err := buildStore(store); err != nil {
		fmt.Fprintln(os.Stderr, "building the model store (run `make models` first):", err)
		return 1
	}
	return m.Run()
}

// buildStore writes the archives the tests register, as `make archives` does: name, the
// zoo's directory, and models/configs' file.
func buildStore(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, a := range [][3]string{
		{"digits", "digits", "digits"},
		{"digits_tensor", "digits", "digits_tensor"},
		{"textcls", "textcls", "textcls"},
		{"resnet18", "resnet18", "resnet18"},
	} {
		var extra []string
		for _, f := range []string{"index_to_name.json", "vocab.txt"} {
			if p := filepath.Join(zooDir, a[1], f); fileExists(p) {
				extra = append(extra, p)
			}
		}
		_, err := archive.Write(archive.WriteOptions{
			ModelName: a[0], Version: "1.0",
			SerializedFile: filepath.Join(zooDir, a[1], "model.pt"),
			ExtraFiles:     extra,
			ConfigFile:     filepath.Join("..", "..", "models", "configs", a[2]+".toml"),
			ExportPath:     dir,
		})
		if err != nil {
			return fmt.Errorf("%s: %w", a[0], err)
		}
	}
	return nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// server is a running torchd process.
type server struct {
	cmd                      *exec.Cmd
	inf, mgmt, metrics, grpc string
	mu                       sync.Mutex
	log                      bytes.Buffer
	exited                   chan struct{}
	exitErr                  error
}

var listenRE = regexp.MustCompile(`msg=listening api=(\w+) addr=(\S+)`)

// startServer runs torchd serve on free ports with the store and extra args, and waits for
// it to listen.
func startServer(t testing.TB, args ...string) *server {
	t.Helper()
	all := append([]string{"serve", "--model-store", store,
		"--inference-address", "127.0.0.1:0", "--management-address", "127.0.0.1:0", "--metrics-address", "127.0.0.1:0",
		"--grpc-address", "127.0.0.1:0", "--grpc-inference-address", "127.0.0.1:0", "--grpc-management-address", "127.0.0.1:0"}, args...)
	s := &server{exited: make(chan struct{})}
	s.cmd = exec.Command(torchdBin, all...)
	// A TMPDIR, snapshot and cache of the test's own; no batching from the environment.
	s.cmd.Env = append(os.Environ(), "BATCH_SIZE=", "WORKERS=", "LINGER_MS=", "TMPDIR="+t.TempDir(),
		"TORCHD_SNAPSHOT_FILE="+filepath.Join(t.TempDir(), "snapshot.json"), "TORCHD_CACHE_DIR="+filepath.Join(t.TempDir(), "cache"))
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addrs := make(chan [2]string, 6)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			s.mu.Lock()
			s.log.WriteString(line + "\n")
			s.mu.Unlock()
			if m := listenRE.FindStringSubmatch(line); m != nil {
				addrs <- [2]string{m[1], m[2]}
			}
		}
	}()
	go func() {
		s.exitErr = s.cmd.Wait()
		close(s.exited)
	}()
	t.Cleanup(s.stop)
	deadline := time.After(30 * time.Second)
	for s.inf == "" || s.mgmt == "" || s.metrics == "" || s.grpc == "" {
		select {
		case a := <-addrs:
			switch a[0] {
			case "inference":
				s.inf = "http://" + a[1]
			case "management":
				s.mgmt = "http://" + a[1]
			case "metrics":
				s.metrics = "http://" + a[1]
			case "grpc":
				s.grpc = a[1]
			}
		case <-s.exited:
			t.Fatalf("torchd exited: %v\n%s", s.exitErr, s.Log())
		case <-deadline:
			t.Fatalf("torchd did not listen within 30 s\n%s", s.Log())
		}
	}
	return s
}

// Log returns what the server has logged so far.
func (s *server) Log() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.log.String()
}

func (s *server) stop() {
	select {
	case <-s.exited:
		return
	default:
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		s.cmd.Process.Kill()
		<-s.exited
	}
}

// register registers an archive of the store synchronously and fails the test on an error.
func (s *server) register(t testing.TB, query string) {
	t.Helper()
	if r := do(t, "POST", s.mgmt+"/models?"+query, "", nil); r.status != 200 {
		t.Fatalf("register %s: %d %s", query, r.status, r.body)
	}
}

// response is a finished HTTP exchange.
type response struct {
	status int
	body   []byte
}

var httpClient = &http.Client{Timeout: 120 * time.Second}

func do(t testing.TB, method, url, contentType string, body []byte) response {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{status: resp.StatusCode, body: b}
}

// expectStatus asserts TorchServe's {"status": ...} answer.
func expectStatus(t *testing.T, r response, code int, status string) {
	t.Helper()
	var b struct {
		Status string `json:"status"`
	}
	if err := json.Unmarshal(r.body, &b); err != nil || r.status != code || b.Status != status {
		t.Fatalf("got %d %s, want %d {\"status\": %q}", r.status, r.body, code, status)
	}
}

// top1 returns the first key of a TorchServe top-k object, which is in descending order.
func top1(body []byte) string {
	dec := json.NewDecoder(bytes.NewReader(body))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return ""
	}
	t, err := dec.Token()
	if err != nil {
		return ""
	}
	s, _ := t.(string)
	return s
}

func pngOf(t testing.TB, w, h int) []byte {
	var b bytes.Buffer
	if err := png.Encode(&b, image.NewGray(image.Rect(0, 0, w, h))); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// zerosJSON is one all-zero digits image, [1][1][28][28], as TorchServe's JSON.
var zerosJSON = "[[[" + strings.TrimSuffix(strings.Repeat("["+strings.TrimSuffix(strings.Repeat("0,", 28), ",")+"],", 28), ",") + "]]]"

// labelsMatch reports whether m carries every label in want.
func labelsMatch(m *dto.Metric, want map[string]string) bool {
	n := 0
	for _, l := range m.GetLabel() {
		if v, ok := want[l.GetName()]; ok && v == l.GetValue() {
			n++
		}
	}
	return n == len(want)
}

func dial(t testing.TB, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func callCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// editedPackage copies the zoo's digits package to a file of t's, passing each entry through
// edit, and appending extra entries (name, bytes) after them.
func editedPackage(t *testing.T, edit func(name string, b []byte) []byte, extra ...[2]string) string {
	t.Helper()
	r, err := zip.OpenReader(filepath.Join(zooDir, "digits", "model.pt2"))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var buf bytes.Buffer
	w := zip.NewWriter(&buf)
	add := func(name string, b []byte) {
		fw, err := w.CreateHeader(&zip.FileHeader{Name: name, Method: zip.Store})
		if err != nil {
			t.Fatal(err)
		}
		fw.Write(b)
	}
	for _, f := range r.File {
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		add(f.Name, edit(f.Name, b))
	}
	for _, e := range extra {
		add(e[0], []byte(e[1]))
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "model.pt2")
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// storeArchive writes serialized with config into the store's sub-directory sub, as a .mar
// or, with archive.FormatNoArchive, a directory, and returns its registration URL.
func storeArchive(t *testing.T, sub, name, serialized, config string, format archive.Format) string {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "model-config.toml")
	if err := os.WriteFile(cfg, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(store, sub), 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := archive.Write(archive.WriteOptions{ModelName: name, SerializedFile: serialized, ConfigFile: cfg,
		ExportPath: filepath.Join(store, sub), Format: format, Force: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(out) })
	return sub + "/" + filepath.Base(out)
}
