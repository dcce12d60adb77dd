package core_test

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/backends/libtorch"
	"github.com/torchd/torchd/core"
	"github.com/torchd/torchd/core/coretest"
	"github.com/torchd/torchd/handlers"
)

// A burst of 200 concurrent requests to the zoo's digits CNN (models/out, real LibTorch and
// the image handler) at batch 4 on one worker is answered in full, while no more requests
// than the window's size ever hold decoded input: the rest wait as raw bodies. (The window's
// rules are inputwindow_test.go's, over the runtime double.)
func TestBurstHoldsBoundedInput(t *testing.T) {
	am, imgs := digits(t)
	r := coretest.NewRegistryOf(t, libtorch.Backend{})
	v, err := r.Add("digits", "1", core.RegisterRequest{Name: "digits", Synchronous: true, Settings: archive.Settings{
		BatchSize: archive.Fixed(4), MinWorkers: archive.Fixed(1), JobQueueSize: archive.Of(256)}}, am)
	if err != nil {
		t.Fatal(err)
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Go(func() {
			<-start
			img := imgs[i%len(imgs)]
			_, err := r.Serve(&core.Request{Model: "digits", Decode: func(*core.ModelVersion) (core.Input, error) {
				return core.Input{Payloads: &handlers.Request{Inputs: []handlers.Payload{{Name: "body", ContentType: "image/png", Data: img}},
					Header: func(string) string { return "" }}}, nil
			}})
			if err != nil {
				t.Errorf("request %d: %v", i, err)
			}
		})
	}
	close(start)
	wg.Wait()
	s := v.Stats()
	t.Logf("window of %d: at most %d held, %d requests waited; %d of %d batches in place", s.WindowSize, s.WindowPeak, s.WindowWaited, s.InPlace, s.Batches)
	if s.WindowPeak > s.WindowSize || s.WindowHeld != 0 {
		t.Fatalf("window of %d held up to %d requests' input, %d after the burst", s.WindowSize, s.WindowPeak, s.WindowHeld)
	}
	if s.WindowWaited == 0 {
		t.Fatalf("200 concurrent requests, yet none waited for the window of %d", s.WindowSize)
	}
}

// digits is a directory archive of the zoo's digits CNN (models/out) and its held-out PNGs.
func digits(t *testing.T) (*archive.Model, [][]byte) {
	t.Helper()
	zoo := filepath.Join("..", "models", "out", "digits")
	dir := t.TempDir()
	for _, f := range []string{"model.pt", "index_to_name.json"} {
		abs, err := filepath.Abs(filepath.Join(zoo, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(abs, filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := os.ReadFile(filepath.Join("..", "models", "configs", "digits.toml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "model-config.toml"), append([]byte("serialized_file = \"model.pt\"\n"), cfg...), 0o644); err != nil {
		t.Fatal(err)
	}
	am, err := archive.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(filepath.Join(zoo, "heldout"))
	if err != nil {
		t.Fatal(err)
	}
	var imgs [][]byte
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".png") {
			b, err := os.ReadFile(filepath.Join(zoo, "heldout", e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			imgs = append(imgs, b)
		}
	}
	return am, imgs
}
