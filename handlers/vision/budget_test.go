package vision

import (
	"sync"
	"testing"
)

// Concurrent Applys never hold more pixels than the budget, and all of them finish, the
// image larger than the whole budget included.
func TestDecodeBudget(t *testing.T) {
	img := encodePNG(t, 300, 200) // 60,000 pixels
	big := encodePNG(t, 500, 400) // 200,000 pixels: more than the budget
	saved := decoding
	decoding = newPixelBudget(150_000) // two such images at a time, not three
	defer func() { decoding = saved }()
	tr := Transform{Width: 16, Height: 16}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			im := img
			if i == 7 {
				im = big
			}
			errs <- tr.Apply(im, make([]float32, 3*16*16))
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if decoding.used != 0 || decoding.peak > decoding.capacity || decoding.peak < 60_000 {
		t.Fatalf("used %d, peak %d of %d", decoding.used, decoding.peak, decoding.capacity)
	}
	t.Logf("peak %d pixels held of a budget of %d", decoding.peak, decoding.capacity)
}

// The buffer pools do not keep a buffer over maxPooledBytes: an idle server must not hold
// a burst's huge images.
func TestPoolDropsHugeBuffers(t *testing.T) {
	var p slicePool[byte]
	big := p.get(maxPooledBytes + 1)
	p.put(big)
	if got := p.get(1); cap(*got) > maxPooledBytes {
		t.Fatalf("the pool kept a %d-byte buffer", cap(*got))
	}
}
