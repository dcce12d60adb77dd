package daemon_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/torchd/torchd/oip"
)

type keys struct {
	Management, Inference, API struct {
		Key string `json:"key"`
	}
}

func readKeys(t *testing.T, path string) keys {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %v, want 0600", st.Mode().Perm())
	}
	b, _ := os.ReadFile(path)
	var k keys
	if err := json.Unmarshal(b, &k); err != nil {
		t.Fatal(err)
	}
	if k.Management.Key == "" || k.Inference.Key == "" || k.API.Key == "" || k.Management.Key == k.Inference.Key {
		t.Fatalf("key file %s: %+v", path, k)
	}
	return k
}

func withKey(t *testing.T, method, url, key string, body []byte) response {
	t.Helper()
	req := must(t, method, url, "application/x-npy", body)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	return send(t, req)
}

// Token authorization as TorchServe's: separate inference and management keys from the key
// file, a missing or wrong key is 400 InvalidKeyException, the API key rotates the others,
// health checks and metrics need none, and a provisioned key file is used as it is.
func TestTokenAuthorization(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "keys.json")
	s := startServer(t, "--enable-token-authorization", "--key-file", keyFile, "--models", "digits_tensor=digits_tensor.mar")
	s.waitHealthy(t)
	k := readKeys(t, keyFile)
	npy, _ := os.ReadFile(filepath.Join(zooDir, "digits", "sample_tensor.npy"))
	predict := s.inf + "/predictions/digits_tensor"

	for _, key := range []string{"", "wrong", k.Management.Key, k.API.Key} {
		errorShape(t, withKey(t, "POST", predict, key, npy), 400, "InvalidKeyException", "inference key")
		errorShape(t, withKey(t, "GET", s.mgmt+"/models", strings.Replace(key, k.Management.Key, k.Inference.Key, 1), nil), 400, "InvalidKeyException", "management key")
	}
	if r := withKey(t, "POST", predict, k.Inference.Key, npy); r.status != 200 {
		t.Fatalf("inference key: %d %s", r.status, r.body)
	}
	if r := withKey(t, "GET", s.mgmt+"/models", k.Management.Key, nil); r.status != 200 {
		t.Fatalf("management key: %d %s", r.status, r.body)
	}
	// The KServe routes (v1, v2, Triton's extensions; the repository's load takes the
	// management key) answer in their own error shape.
	for _, u := range []string{"/v2/models/digits_tensor/infer", "/v1/models/digits_tensor:predict", "/v2/repository/index", "/v2/repository/models/digits_tensor/load"} {
		r := withKey(t, "POST", s.inf+u, "", []byte(`{"inputs": []}`))
		var e oip.ErrorResponse
		if r.status != 400 || json.Unmarshal(r.body, &e) != nil || !strings.Contains(e.Error, "Token Authorization failed") {
			t.Fatalf("%s without a key: %d %s", u, r.status, r.body)
		}
	}
	// OpenAI's route answers in OpenAI's shape, 401 as OpenAI answers a bad key.
	r := withKey(t, "POST", s.inf+"/v1/embeddings", "wrong", []byte(`{"model": "m", "input": "x"}`))
	var oe struct {
		Error struct{ Message, Type, Code string }
	}
	if r.status != 401 || json.Unmarshal(r.body, &oe) != nil || oe.Error.Code != "invalid_api_key" || !strings.Contains(oe.Error.Message, "Token Authorization failed") {
		t.Fatalf("embeddings without the key: %d %s", r.status, r.body)
	}
	// Probes and scrapers need no key.
	for _, u := range []string{s.inf + "/ping", s.inf + "/v2/health/live", s.inf + "/v2/health/ready", s.metrics + "/metrics"} {
		if r := do(t, "GET", u, "", nil); r.status != 200 {
			t.Fatalf("GET %s without a key: %d %s", u, r.status, r.body)
		}
	}

	// Rotation: only the API key may rotate; the old key stops working at once.
	errorShape(t, withKey(t, "GET", s.mgmt+"/token?type=inference", k.Management.Key, nil), 400, "InvalidKeyException", "API key")
	errorShape(t, withKey(t, "GET", s.mgmt+"/token?type=nope", k.API.Key, nil), 400, "BadRequestException", "management or inference")
	var rotated struct{ Key string }
	withKey(t, "GET", s.mgmt+"/token?type=inference", k.API.Key, nil).json(t, &rotated)
	if rotated.Key == "" || rotated.Key == k.Inference.Key {
		t.Fatalf("rotation returned %q", rotated.Key)
	}
	errorShape(t, withKey(t, "POST", predict, k.Inference.Key, npy), 400, "InvalidKeyException", "inference key")
	if r := withKey(t, "POST", predict, rotated.Key, npy); r.status != 200 {
		t.Fatalf("rotated key: %d %s", r.status, r.body)
	}
	if now := readKeys(t, keyFile); now.Inference.Key != rotated.Key || now.Management.Key != k.Management.Key {
		t.Fatalf("key file after rotation: %+v", now)
	}
	if strings.Contains(s.Log(), "exposed beyond localhost") {
		t.Error("warned about an exposed management API bound to localhost")
	}
	s.stop()

	// A restart reads the key file as it is: the rotated key still works.
	s2 := startServer(t, "--enable-token-authorization", "--key-file", keyFile, "--models", "digits_tensor=digits_tensor.mar")
	s2.waitHealthy(t)
	if r := withKey(t, "POST", s2.inf+"/predictions/digits_tensor", rotated.Key, npy); r.status != 200 {
		t.Fatalf("rotated key after a restart: %d %s", r.status, r.body)
	}
	// A broken key file stops the start with a clear error.
	bad := filepath.Join(t.TempDir(), "bad.json")
	os.WriteFile(bad, []byte(`{"management": {"key": "x"}}`), 0o600)
	out, err := runTorchd(t, "serve", "--enable-token-authorization", "--key-file", bad, "--inference-address", "127.0.0.1:0",
		"--management-address", "127.0.0.1:0", "--metrics-address", "127.0.0.1:0")
	if err == nil || !strings.Contains(out, "keys are all required") {
		t.Fatalf("start with a broken key file: %v\n%s", err, out)
	}
}

// Management bound beyond localhost without token authorization: torchd warns at start-up.
func TestExposedManagementWarns(t *testing.T) {
	s := startServer(t, "--management-address", "0.0.0.0:0")
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(s.Log(), "exposed beyond localhost without token authorization"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no warning for an exposed management API:\n%s", s.Log())
		}
	}
}
