package daemon_test

import (
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/torchd/torchd/daemon"
)

// kserveV2Properties is KServe's docs/samples/v1beta1/torchserve/v2/config.properties as
// KServe ships it: TorchServe's layout, which KServe's storage initializer puts under
// /mnt/models (config/config.properties and model-store/mnist.mar).
const kserveV2Properties = `inference_address=http://0.0.0.0:8085
management_address=http://0.0.0.0:8085
metrics_address=http://0.0.0.0:8082
grpc_inference_port=7070
grpc_management_port=7071
enable_metrics_api=true
metrics_format=prometheus
number_of_netty_threads=4
job_queue_size=10
enable_envvars_config=true
install_py_dep_per_model=false
model_store=/mnt/models/model-store
model_snapshot={"name":"startup.cfg","modelCount":1,"models":{"mnist":{"1.0":{"defaultVersion":true,"marName":"mnist.mar","minWorkers":1,"maxWorkers":5,"batchSize":2,"maxBatchDelay":500,"responseTimeout":60}}}}
`

// torchServeTree writes KServe's layout into a new directory: config/config.properties and
// model-store/ holding the given archives (file name → source path).
func torchServeTree(t *testing.T, properties string, archives map[string]string) (root string) {
	t.Helper()
	root = t.TempDir()
	for _, d := range []string{"config", "model-store"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "config", "config.properties"), []byte(properties), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, src := range archives {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, "model-store", name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// `torchd serve --ts-config` serves KServe's TorchServe layout (what the models' settings
// become is frontend/torchserve's TestStartupVersionsKServe, TestStartupVersionsDefault,
// TestPerModelSettings and TestTorchServeMetricsLog; the file's parsing daemon's
// TestTorchServeConfig*): KServe's examples give the inference and management APIs one
// address, which TorchServe serves on one port, and so does torchd; keys torchd does not use
// are logged. A config.properties that torchd cannot take stops it at start with the file and
// the key in the message.
func TestTorchServeLayoutSharedPortAndErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	props := strings.NewReplacer("http://0.0.0.0:8085", "http://"+addr, "0.0.0.0:8082", "127.0.0.1:0").Replace(kserveV2Properties)
	root := torchServeTree(t, props, map[string]string{"mnist.mar": filepath.Join(store, "digits.mar")})
	cfg := filepath.Join(root, "config", "config.properties")
	// The harness's address flags would win over the file's: give the file's again.
	s := startServer(t, "--ts-config", cfg, "--model-store", filepath.Join(root, "model-store"), "--inference-address", addr, "--management-address", addr)
	s.waitHealthy(t)
	if s.mgmt != s.inf {
		t.Fatalf("management on %s, inference on %s: want one port", s.mgmt, s.inf)
	}
	if r := do(t, "GET", s.inf+"/models", "", nil); r.status != 200 || !strings.Contains(string(r.body), `"mnist"`) {
		t.Fatalf("management's list on the shared port: %d %s", r.status, r.body)
	}
	pngs, labels := heldOut(t)
	if r := do(t, "POST", s.inf+"/predictions/mnist", "image/png", pngs[0]); r.status != 200 || top1(r.body) != labels[0] {
		t.Fatalf("inference on the shared port: %d %s", r.status, r.body)
	}
	if !strings.Contains(s.Log(), "key not used by torchd") || !strings.Contains(s.Log(), "number_of_netty_threads") {
		t.Errorf("the ignored key number_of_netty_threads is not logged:\n%s", s.Log())
	}

	noEnv := func(string) string { return "" }
	for _, c := range []struct{ props, want string }{
		{"inference_address=8080\n", `key inference_address: want http://host:port or https://host:port, got "8080"`},
		{"job_queue_size=ten\n", `key job_queue_size: want an integer ≥ 1, got "ten"`},
		{"metrics_mode=json\n", `key metrics_mode: want prometheus or log, got "json"`},
		{`model_snapshot={"models":{"m":{"1.0":{"marName":"m.mar","minWorkers":-1}}}}` + "\n", "model m version 1.0: minWorkers: must be an integer >= 0, got -1"},
		{"model_snapshot={\"models\"\n", "not the JSON of a TorchServe snapshot"},
		{"inference_address=https://127.0.0.1:8443\n", "an https:// address needs certificate_file and private_key_file"},
	} {
		p := filepath.Join(t.TempDir(), "config.properties")
		os.WriteFile(p, []byte(c.props), 0o644)
		if _, err := daemon.LoadConfig([]string{"--ts-config", p}, noEnv); err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), p) {
			t.Errorf("%q: %v\nwant %q", c.props, err, c.want)
		}
	}
	if _, err := daemon.LoadConfig([]string{"--ts-config", filepath.Join(root, "nothing.properties")}, noEnv); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("a missing config.properties: %v", err)
	}
	// A ts_metrics.log that cannot be made (METRICS_LOCATION a file) stops the start, with the
	// file named.
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	mc, err := daemon.LoadConfig([]string{"--ts-config", writeFile(t, "metrics_mode=log\n"), "--model-store", t.TempDir(), "--inference-address", "127.0.0.1:0",
		"--management-address", "127.0.0.1:0", "--metrics-address", "127.0.0.1:0", "--grpc-address=", "--grpc-inference-address=", "--grpc-management-address="},
		func(k string) string { return map[string]string{"METRICS_LOCATION": notDir}[k] })
	if err != nil {
		t.Fatal(err)
	}
	d := daemon.New(mc, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err := d.Start(); err == nil || !strings.Contains(err.Error(), "metrics_mode=log: "+filepath.Join(notDir, "ts_metrics.log")+": not a directory") {
		t.Errorf("METRICS_LOCATION a file: %v", err)
		if err == nil {
			d.Shutdown(t.Context())
		}
	}
}

func writeFile(t *testing.T, body string) string {
	p := filepath.Join(t.TempDir(), "config.properties")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
