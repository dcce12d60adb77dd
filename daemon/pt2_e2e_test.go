package daemon_test

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"testing"
)

func init() {
	storePackages = append(storePackages,
		storeArchive{"digits_pt2", "digits", "digits_tensor", "1.0", "pt2"},
		storeArchive{"digits_pt2_img", "digits", "digits", "1.0", "pt2"})
}

// TestPackageOverHTTP serves the digits AOTInductor package through the tensor handler:
// concurrent requests are batched into one package call, and each answer equals the one the
// same request got alone; the image handler's answers match the TorchScript model's.
func TestPackageOverHTTP(t *testing.T) {
	s := startServer(t)
	s.register(t, "url=pt2/digits_pt2.mar&batch_size=16&max_batch_delay=20&initial_workers=2")
	n := 48
	bodies := make([][]byte, n)
	for i := range bodies {
		v := float64(i)/float64(n)*2 - 1
		row := strings.Repeat(strconv.FormatFloat(v, 'f', 6, 64)+",", 28*28)
		bodies[i] = []byte(fmt.Sprintf(`{"data": [%s], "shape": [1, 1, 28, 28]}`, strings.TrimSuffix(row, ",")))
	}
	alone := make([][]float64, n)
	for i, b := range bodies {
		alone[i] = tensorData(t, do(t, "POST", s.inf+"/predictions/digits_pt2", "application/json", b))
	}
	batched := make([][]float64, n)
	var wg sync.WaitGroup
	for i, b := range bodies {
		wg.Go(func() {
			batched[i] = tensorData(t, do(t, "POST", s.inf+"/predictions/digits_pt2", "application/json", b))
		})
	}
	wg.Wait()
	for i := range bodies {
		for k := range alone[i] {
			if math.Abs(alone[i][k]-batched[i][k]) > 1e-5 {
				t.Fatalf("request %d: batched output %v differs from its one-by-one output %v", i, batched[i], alone[i])
			}
		}
	}
	if _, mean := s.batching(t, "digits_pt2"); mean <= 1.05 {
		t.Fatalf("no batching under concurrent load: mean batch size %.2f", mean)
	}

	// The same PNGs through the image handler: top-1 equals the TorchScript model's.
	s.register(t, "url=pt2/digits_pt2_img.mar&batch_size=8&initial_workers=1")
	s.register(t, "url=digits.mar&initial_workers=1")
	pngs, _ := heldOut(t)
	for i, png := range pngs[:40] {
		got := top1(do(t, "POST", s.inf+"/predictions/digits_pt2_img", "image/png", png).body)
		want := top1(do(t, "POST", s.inf+"/predictions/digits", "image/png", png).body)
		if got != want {
			t.Fatalf("image %d: package says %s, TorchScript says %s", i, got, want)
		}
	}

	// KServe v2 metadata comes from the package's recorded signature.
	r := do(t, "GET", s.inf+"/v2/models/digits_pt2", "", nil)
	if r.status != 200 || !strings.Contains(string(r.body), `"shape":[-1,1,28,28]`) {
		t.Fatalf("v2 metadata: %d %s", r.status, r.body)
	}
}

// TestPackageRegistrationRefusals registers a package with a batch size beyond its exported
// range (400), and the server keeps serving.
func TestPackageRegistrationRefusals(t *testing.T) {
	s := startServer(t)
	r := do(t, "POST", s.mgmt+"/models?url=pt2/digits_pt2.mar&batch_size=65&initial_workers=1&synchronous=true", "", nil)
	errorShape(t, r, 400, "ModelException", "batch_size 65 is outside the batch range [1, 64]")
	s.register(t, "url=pt2/digits_pt2.mar&batch_size=64&initial_workers=1&synchronous=true")
	body := `{"data": [` + strings.TrimSuffix(strings.Repeat("0.5,", 784), ",") + `], "shape": [1, 1, 28, 28]}`
	if len(tensorData(t, do(t, "POST", s.inf+"/predictions/digits_pt2", "application/json", []byte(body)))) != 10 {
		t.Fatal("no 10 logits after a refused registration")
	}
}
