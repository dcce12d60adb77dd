package daemon_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	pb "github.com/torchd/torchd/proto/inference"
)

// selfSigned writes a certificate for 127.0.0.1 and its key, and returns their paths and a
// pool that trusts the certificate.
func selfSigned(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "torchd test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// With certificate_file and private_key_file, all three ports serve HTTPS (and the gRPC ports TLS), and plain HTTP
// gets no answer from them; a half-configured TLS stops the start.
func TestTLS(t *testing.T) {
	certFile, keyFile, pool := selfSigned(t)
	s := startServer(t, "--certificate-file", certFile, "--private-key-file", keyFile, "--models", "digits_tensor=digits_tensor.mar")
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	https := func(u string) string { return strings.Replace(u, "http://", "https://", 1) }
	get := func(u string) (int, string) {
		t.Helper()
		resp, err := c.Get(u)
		if err != nil {
			t.Fatalf("GET %s: %v", u, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if code, _ := get(https(s.inf) + "/ping"); code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("never healthy over HTTPS")
		}
	}
	npy, _ := os.ReadFile(filepath.Join(zooDir, "digits", "sample_tensor.npy"))
	resp, err := c.Post(https(s.inf)+"/predictions/digits_tensor", "application/x-npy", strings.NewReader(string(npy)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.TLS == nil {
		t.Fatalf("predict over HTTPS: %d, TLS %v", resp.StatusCode, resp.TLS != nil)
	}
	if code, body := get(https(s.mgmt) + "/models"); code != 200 || !strings.Contains(body, "digits_tensor") {
		t.Fatalf("management over HTTPS: %d %s", code, body)
	}
	if code, body := get(https(s.metrics) + "/metrics"); code != 200 || !strings.Contains(body, "torchd_requests_total") {
		t.Fatalf("metrics over HTTPS: %d", code)
	}
	plain := &http.Client{Timeout: 5 * time.Second}
	for _, u := range []string{s.inf + "/ping", s.mgmt + "/models", s.metrics + "/metrics"} {
		if resp, err := plain.Get(u); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				t.Fatalf("plain HTTP to %s answered 200", u)
			}
		}
	}
	// The gRPC ports serve TLS too.
	conn, err := grpc.NewClient(s.grpc, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if r, err := pb.NewGRPCInferenceServiceClient(conn).ServerLive(callCtx(t), &pb.ServerLiveRequest{}); err != nil || !r.GetLive() {
		t.Fatalf("gRPC over TLS: %v %v", r, err)
	}
	if _, err := pb.NewGRPCInferenceServiceClient(dial(t, s.grpc)).ServerLive(callCtx(t), &pb.ServerLiveRequest{}); err == nil {
		t.Fatal("plain gRPC was answered on the TLS port")
	}
	if out, err := runTorchd(t, "serve", "--certificate-file", certFile); err == nil || !strings.Contains(out, "both certificate_file and private_key_file") {
		t.Fatalf("TLS without a key: %v %s", err, out)
	}
	if out, err := runTorchd(t, "serve", "--certificate-file", keyFile, "--private-key-file", keyFile, "--inference-address", "127.0.0.1:0"); err == nil || !strings.Contains(out, "TLS") {
		t.Fatalf("TLS with a bad certificate: %v %s", err, out)
	}
}
