package vision_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"mime/multipart"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/torchd/torchd/archive"
)

// captionerScenes returns the captioner's held-out PNGs and their captions, in name order.
func captionerScenes(t testing.TB) ([][]byte, []string) {
	t.Helper()
	dir := filepath.Join(zooDir, "captioner", "heldout")
	b, err := os.ReadFile(filepath.Join(dir, "captions.json"))
	if err != nil {
		t.Fatal(err)
	}
	var want map[string]string
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	var imgs [][]byte
	var caps []string
	for _, name := range slices.Sorted(maps.Keys(want)) {
		img, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		imgs = append(imgs, img)
		caps = append(caps, want[name])
	}
	return imgs, caps
}

func captionOf(t testing.TB, r response) string {
	t.Helper()
	if r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	var c struct {
		Caption *string `json:"caption"`
	}
	r.json(t, &c)
	if c.Caption == nil {
		t.Fatalf("no caption in %s", r.body)
	}
	return *c.Caption
}

// Every held-out scene sent concurrently, so that batches form: at least 90% of the captions
// are exactly right, a batched caption equals the one-by-one caption of the same scene, and
// several images in one request get an array of captions in their order.
func TestCaptionerOverHTTP(t *testing.T) {
	gate(t)
	s := startServer(t)
	s.register(t, "url=captioner.mar&batch_size=16&max_batch_delay=10&initial_workers=1&synchronous=true")
	u := s.inf + "/predictions/captioner"
	imgs, want := captionerScenes(t)

	resps := make([]response, len(imgs))
	var wg sync.WaitGroup
	work := make(chan int)
	for range 32 {
		wg.Go(func() {
			for i := range work {
				resps[i] = do(t, "POST", u, "image/png", imgs[i])
			}
		})
	}
	for i := range imgs {
		work <- i
	}
	close(work)
	wg.Wait()
	batched := make([]string, len(imgs))
	for i, r := range resps {
		batched[i] = captionOf(t, r)
	}

	right := 0
	for i := range imgs {
		if batched[i] == want[i] {
			right++
		}
	}
	acc := float64(right) / float64(len(imgs))
	t.Logf("held-out exact match through HTTP: %.4f over %d scenes", acc, len(imgs))
	if acc < 0.9 {
		t.Fatalf("exact match %.4f < 0.90", acc)
	}

	if _, mean := s.batching(t, "captioner"); mean <= 1.05 {
		t.Fatalf("no batching under concurrent load: mean batch size %.2f", mean)
	}

	// One at a time, each request is a batch of its own.
	for i := range imgs[:48] {
		if alone := captionOf(t, do(t, "POST", u, "image/png", imgs[i])); alone != batched[i] {
			t.Errorf("scene %d: one-by-one %q, batched %q", i, alone, batched[i])
		}
	}

	ct, body := multipartScenes(imgs[:3])
	r := do(t, "POST", u, ct, body)
	var three []struct{ Caption string }
	r.json(t, &three)
	if r.status != 200 || len(three) != 3 {
		t.Fatalf("3 images in one request: %d %s", r.status, r.body)
	}
	for i, c := range three {
		if c.Caption != batched[i] {
			t.Errorf("image %d of a multipart request: %q, alone %q", i, c.Caption, batched[i])
		}
	}

	errorShape(t, do(t, "POST", u, "image/png", imgs[0][:len(imgs[0])/2]), 400, "BadRequestException", "")
	errorShape(t, do(t, "POST", u, "image/png", []byte("not an image")), 400, "BadRequestException", "")
}

// multipartScenes is one request of several scenes: its content type and body.
func multipartScenes(imgs [][]byte) (string, []byte) {
	var mp bytes.Buffer
	w := multipart.NewWriter(&mp)
	for i, img := range imgs {
		fw, _ := w.CreateFormFile("data", fmt.Sprintf("%d.png", i))
		fw.Write(img)
	}
	w.Close()
	return w.FormDataContentType(), mp.Bytes()
}

// TestCaptionerEncoderPackageOverHTTP serves the captioner with its encoder from encoder.pt2
// (models/pt2.py) and its decoding loop in TorchScript (captioner_pt2) beside the
// all-TorchScript captioner: for every held-out scene its caption equals TorchScript's, sent
// alone, concurrently (batched), and five scenes a request, so that batches of up to 80 rows
// run the package, exported for at most 64, in two parts.
func TestCaptionerEncoderPackageOverHTTP(t *testing.T) {
	gate(t)
	s := startServer(t)
	s.register(t, "url=captioner.mar&batch_size=16&initial_workers=1&synchronous=true")
	s.register(t, "url=captioner_pt2.mar&batch_size=16&max_batch_delay=20&initial_workers=1&synchronous=true")
	imgs, _ := captionerScenes(t)
	want := make([]string, len(imgs))
	for i, img := range imgs {
		want[i] = captionOf(t, do(t, "POST", s.inf+"/predictions/captioner", "image/png", img))
	}
	u := s.inf + "/predictions/captioner_pt2"
	for i, img := range imgs {
		if got := captionOf(t, do(t, "POST", u, "image/png", img)); got != want[i] {
			t.Errorf("scene %d alone: %q, TorchScript %q", i, got, want[i])
		}
	}

	// Concurrent requests of one scene, then of five: each worker takes whole requests.
	for _, per := range []int{1, 5} {
		got := make([]string, len(imgs))
		var wg sync.WaitGroup
		work := make(chan int)
		for range 32 {
			wg.Go(func() {
				for i := range work {
					if per == 1 {
						got[i] = captionOf(t, do(t, "POST", u, "image/png", imgs[i]))
						continue
					}
					ct, body := multipartScenes(imgs[i : i+per])
					r := do(t, "POST", u, ct, body)
					var caps []struct{ Caption string }
					r.json(t, &caps)
					if r.status != 200 || len(caps) != per {
						t.Errorf("%d scenes in one request: %d %s", per, r.status, r.body)
						continue
					}
					for j, c := range caps {
						got[i+j] = c.Caption
					}
				}
			})
		}
		for i := 0; i < len(imgs); i += per {
			work <- i
		}
		close(work)
		wg.Wait()
		for i := range imgs {
			if got[i] != want[i] {
				t.Errorf("%d a request, batched, scene %d: %q, TorchScript %q", per, i, got[i], want[i])
			}
		}
	}
	if _, mean := s.batching(t, "captioner_pt2"); mean <= 1.05 {
		t.Fatalf("no batching under concurrent load: mean batch size %.2f", mean)
	}
}

// writeCaptionerArchive writes a directory archive of the captioner_pt2 config over the
// TorchScript file serialized, with encoder as encoder.pt2 when it is not nil, and returns
// its path.
func writeCaptionerArchive(t *testing.T, name, serialized string, encoder []byte) string {
	t.Helper()
	extra := []string{filepath.Join(zooDir, "captioner", "vocab.json")}
	if encoder != nil {
		p := filepath.Join(t.TempDir(), "encoder.pt2")
		if err := os.WriteFile(p, encoder, 0o644); err != nil {
			t.Fatal(err)
		}
		extra = append(extra, p)
	}
	out, err := archive.Write(archive.WriteOptions{ModelName: name, SerializedFile: serialized, ExtraFiles: extra,
		ConfigFile: filepath.Join("..", "..", "models", "configs", "captioner_pt2.toml"),
		ExportPath: t.TempDir(), Format: archive.FormatNoArchive, Force: true})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestCaptionerEncoderPackageRefusals registers captioners whose encoder package is corrupt,
// missing, or made for other inputs (the digits CNN's), and one whose TorchScript model has no
// decode method: each is a 400 that names the problem, and the server keeps captioning.
func TestCaptionerEncoderPackageRefusals(t *testing.T) {
	s := startServer(t)
	model := filepath.Join(zooDir, "captioner", "model.pt")
	good, err := os.ReadFile(filepath.Join(zooDir, "captioner", "encoder.pt2"))
	if err != nil {
		t.Fatal(err)
	}
	digits, err := os.ReadFile(filepath.Join(zooDir, "digits", "model.pt2"))
	if err != nil {
		t.Fatal(err)
	}
	s.register(t, "url=captioner_pt2.mar&initial_workers=1&synchronous=true")
	imgs, _ := captionerScenes(t)
	want := captionOf(t, do(t, "POST", s.inf+"/predictions/captioner_pt2", "image/png", imgs[0]))

	for _, c := range []struct {
		name, serialized string
		encoder          []byte
		msg              string
	}{
		{"corrupt", model, good[:len(good)/2], "option encoder"},
		{"missing", model, nil, `option encoder: the archive has no file "encoder.pt2"`},
		{"digits", model, digits, "encoder.pt2 must take one float32 input of shape [-1 3 64 64], it takes [float32 [-1 1 28 28]]"},
		{"nodecode", filepath.Join(zooDir, "digits", "model.pt"), good, "has no decode(features, max_length) method"},
	} {
		dir := writeCaptionerArchive(t, "captioner_"+c.name, c.serialized, c.encoder)
		r := do(t, "POST", s.mgmt+"/models?url="+url.QueryEscape(dir)+"&initial_workers=1&synchronous=true", "", nil)
		errorShape(t, r, 400, "ModelException", c.msg)
		t.Logf("%s: %s", c.name, r.body)
		if got := captionOf(t, do(t, "POST", s.inf+"/predictions/captioner_pt2", "image/png", imgs[0])); got != want {
			t.Fatalf("after the %s encoder: %q, before %q", c.name, got, want)
		}
	}
}
