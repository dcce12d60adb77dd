package daemon_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"mime/multipart"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
)

func init() {
	storeArchives = append(storeArchives, storeArchive{"captioner", "captioner", "captioner", "1.0", ""})
}

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
	s := startServer(t)
	s.register(t, "url=captioner.mar&batch_size=16&max_batch_delay=10&initial_workers=1&synchronous=true")
	url := s.inf + "/predictions/captioner"
	imgs, want := captionerScenes(t)

	resps := make([]response, len(imgs))
	var wg sync.WaitGroup
	work := make(chan int)
	for range 32 {
		wg.Go(func() {
			for i := range work {
				resps[i] = do(t, "POST", url, "image/png", imgs[i])
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
		if alone := captionOf(t, do(t, "POST", url, "image/png", imgs[i])); alone != batched[i] {
			t.Errorf("scene %d: one-by-one %q, batched %q", i, alone, batched[i])
		}
	}

	var mp bytes.Buffer
	w := multipart.NewWriter(&mp)
	for i := range 3 {
		fw, _ := w.CreateFormFile("data", fmt.Sprintf("%d.png", i))
		fw.Write(imgs[i])
	}
	w.Close()
	r := do(t, "POST", url, w.FormDataContentType(), mp.Bytes())
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

	errorShape(t, do(t, "POST", url, "image/png", imgs[0][:len(imgs[0])/2]), 400, "BadRequestException", "")
	errorShape(t, do(t, "POST", url, "image/png", []byte("not an image")), 400, "BadRequestException", "")
}
