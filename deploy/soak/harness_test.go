package soak_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/frontend/frontendtest"
	"github.com/torchd/torchd/internal/torchdtest"
	"github.com/torchd/torchd/internal/zootest"
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
	if torchdBin, err = torchdtest.Build(filepath.Join("..", ".."), tmp, false); err != nil {
		fmt.Fprintln(os.Stderr, err)
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
	*torchdtest.Process
	inf, mgmt, metrics, grpc string
}

// startServer runs torchd serve on free ports with the store and extra args, and waits for
// it to listen. It has a TMPDIR, snapshot and cache of the test's own, and no batching
// from the environment.
func startServer(t testing.TB, args ...string) *server {
	t.Helper()
	p := torchdtest.Start(t, torchdBin, []string{"BATCH_SIZE=", "WORKERS=", "LINGER_MS=", "TMPDIR=" + t.TempDir(),
		"TORCHD_SNAPSHOT_FILE=" + filepath.Join(t.TempDir(), "snapshot.json"), "TORCHD_CACHE_DIR=" + filepath.Join(t.TempDir(), "cache")},
		append(torchdtest.ServeArgs(store), args...))
	a := p.Addrs
	return &server{Process: p, inf: "http://" + a["inference"], mgmt: "http://" + a["management"], metrics: "http://" + a["metrics"], grpc: a["grpc"]}
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
func top1(body []byte) string { return zootest.Top1(body) }

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

func dial(t testing.TB, addr string) *grpc.ClientConn { return frontendtest.DialGRPC(t, addr) }

func callCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
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
