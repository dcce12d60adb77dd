package daemon_test

// Helpers of tests that moved out of daemon/ (#63) which the tests kept here still use:
// body_test.go runs a daemon in process, soak_hostile_test.go writes hostile archives, and
// several send with post and timed.

import (
	"bytes"
	"image"
	"image/png"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/torchd/torchd/archive"
)

// The digits AOTInductor package behind the tensor handler, which the package attacks
// register (the zoo's packages are backends/libtorch's tests).
func init() {
	storePackages = append(storePackages, storeArchive{"digits_pt2", "digits", "digits_tensor", "1.0", "pt2"})
}

// writeDigitsArchive writes models/out/digits/<file> into the store's pt2/ as a directory
// archive named name with config, then lets edit change its manifest.
func writeDigitsArchive(t *testing.T, name, file, config string, edit func(*archive.Manifest)) {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "model-config.toml")
	if err := os.WriteFile(cfg, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := archive.Write(archive.WriteOptions{ModelName: name, SerializedFile: filepath.Join(zooDir, "digits", file),
		ConfigFile: cfg, ExportPath: filepath.Join(store, "pt2"), Format: archive.FormatNoArchive, Force: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(out) })
	if edit == nil {
		return
	}
	mp := filepath.Join(out, archive.ManifestPath)
	b, err := os.ReadFile(mp)
	if err != nil {
		t.Fatal(err)
	}
	m, err := archive.ParseManifest(b)
	if err != nil {
		t.Fatal(err)
	}
	edit(&m)
	if b, err = m.Encode(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(mp, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func pngOf(t testing.TB, w, h int) []byte {
	var b bytes.Buffer
	if err := png.Encode(&b, image.NewGray(image.Rect(0, 0, w, h))); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func repeatJSON(v string, n int) string {
	return "[" + strings.TrimSuffix(strings.Repeat(v+",", n), ",") + "]"
}

// post sends body without failing the test on a transport error (the caller may be a
// goroutine); a transport error comes back as status 0 with the error as the body.
func post(url, contentType string, body []byte, header ...string) response {
	req, _ := http.NewRequest("POST", url, bytes.NewReader(body))
	req.Header.Set("Content-Type", contentType)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return response{body: []byte(err.Error())}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}
