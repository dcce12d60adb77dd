package vision

import "sync"

// DecodeBudget is how many pixels the whole process decodes at once, over every concurrent
// Apply. MaxPixels bounds one image; without this bound, 100 concurrent requests of a 100 KB
// PNG declaring 6000×6000 would ask for about 25 GB at the same moment. An image waits until
// its pixels fit; one larger than the whole budget waits until nothing else is decoding.
const DecodeBudget = 2 * DefaultMaxPixels

var decoding = newPixelBudget(DecodeBudget)

// pixelBudget is a weighted semaphore of pixels.
type pixelBudget struct {
	mu         sync.Mutex
	cond       *sync.Cond
	capacity   int64
	used, peak int64
}

func newPixelBudget(capacity int64) *pixelBudget {
	b := &pixelBudget{capacity: capacity}
	b.cond = sync.NewCond(&b.mu)
	return b
}

// acquire waits until n pixels fit (n is capped at the capacity) and returns their release.
func (b *pixelBudget) acquire(n int64) (release func()) {
	n = min(n, b.capacity)
	b.mu.Lock()
	for b.used+n > b.capacity {
		b.cond.Wait()
	}
	b.used += n
	b.peak = max(b.peak, b.used)
	b.mu.Unlock()
	return func() {
		b.mu.Lock()
		b.used -= n
		b.mu.Unlock()
		b.cond.Broadcast()
	}
}
