package torch_test

import (
	"math"
	"testing"

	"github.com/torchd/torchd/torch"
)

// Captum's gausslegendre alphas and step sizes, from NumPy's leggauss, for 3 and 15 steps.
func TestGaussLegendre(t *testing.T) {
	a, w := torch.GaussLegendre(3)
	wantA := []float64{0.1127016653792583, 0.5, 0.8872983346207417}
	wantW := []float64{0.2777777777777777, 0.4444444444444444, 0.2777777777777777}
	for i := range 3 {
		if math.Abs(a[i]-wantA[i]) > 1e-12 || math.Abs(w[i]-wantW[i]) > 1e-12 {
			t.Fatalf("n=3: alphas %v weights %v", a, w)
		}
	}
	for _, n := range []int{1, 15, 50} {
		a, w := torch.GaussLegendre(n)
		sum := 0.0
		for i := range n {
			sum += w[i]
			if a[i] <= 0 || a[i] >= 1 || (i > 0 && a[i] <= a[i-1]) {
				t.Fatalf("n=%d: alphas %v", n, a)
			}
		}
		if math.Abs(sum-1) > 1e-12 {
			t.Fatalf("n=%d: weights sum to %v", n, sum)
		}
	}
}
