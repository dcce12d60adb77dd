package torch

/*
#include <stdlib.h>
#include "capi/torchd.h"
*/
import "C"

import (
	"errors"
	"math"
	"runtime"
	"unsafe"
)

// IntegratedGradients returns Captum's Integrated Gradients of method's output[:, target]
// with respect to args[arg], a float tensor [B, ...]: the gradients at baseline + alpha ×
// (input − baseline) for each of alphas, summed with weights, times (input − baseline). The
// steps run as one batch of len(alphas) × B rows with autograd on; every other tensor argument
// is repeated once per step. GaussLegendre gives Captum's default alphas and weights.
// The result is float32, of the input's shape, and owned by the caller.
func (m *Module) IntegratedGradients(method string, args []any, arg int, baseline *Tensor, alphas, weights []float64, target int) (*Tensor, error) {
	if len(alphas) == 0 || len(alphas) != len(weights) {
		return nil, errors.New("torch: integrated gradients need as many weights as alphas, at least one")
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.h == nil {
		return nil, ErrClosed
	}
	e := encoder{shapeOff: map[int]int{}, strOff: map[int]int{}}
	defer e.pinner.Unpin()
	if err := e.values(append(append([]any{}, args...), baseline)); err != nil {
		return nil, err
	}
	e.finish()
	cm, freeMethod := cstring(method)
	defer freeMethod()
	var res *C.td_result
	err := statusError("integrated gradients "+method, C.td_module_integrated_gradients(m.h, cm, &e.nodes[0], C.int(len(e.nodes)), C.int(arg),
		(*C.double)(unsafe.Pointer(&alphas[0])), (*C.double)(unsafe.Pointer(&weights[0])), C.int(len(alphas)), C.int64_t(target), &res))
	runtime.KeepAlive(e.tensors)
	runtime.KeepAlive(alphas)
	runtime.KeepAlive(weights)
	if err != nil {
		return nil, err
	}
	defer C.td_result_free(res)
	var n C.int
	p := C.td_result_nodes(res, &n)
	d := decoder{nodes: unsafe.Slice(p, int(n))}
	v, err := d.value()
	if err != nil {
		return nil, err
	}
	t, ok := v.(*Tensor)
	if !ok {
		CloseValue(v)
		return nil, errors.New("torch: integrated gradients returned no tensor")
	}
	return t, nil
}

// GaussLegendre returns Captum's default ("gausslegendre") path points in [0, 1] and their
// weights for n steps: NumPy's leggauss nodes x and weights w, as (x+1)/2 and w/2.
func GaussLegendre(n int) (alphas, weights []float64) {
	alphas, weights = make([]float64, n), make([]float64, n)
	for i := range n {
		// Newton's method on P_n from Chebyshev's estimate of root i, in ascending order.
		x := -math.Cos(math.Pi * (float64(i) + 0.75) / (float64(n) + 0.5))
		var dp float64
		for range 100 {
			p0, p1 := 1.0, x
			for k := 2; k <= n; k++ {
				p0, p1 = p1, ((2*float64(k)-1)*x*p1-(float64(k)-1)*p0)/float64(k)
			}
			if n == 1 {
				p0, p1 = 1, x
			}
			dp = float64(n) * (x*p1 - p0) / (x*x - 1)
			dx := p1 / dp
			x -= dx
			if math.Abs(dx) < 1e-16 {
				break
			}
		}
		p0, p1 := 1.0, x
		for k := 2; k <= n; k++ {
			p0, p1 = p1, ((2*float64(k)-1)*x*p1-(float64(k)-1)*p0)/float64(k)
		}
		if n == 1 {
			p0, p1 = 1, x
		}
		dp = float64(n) * (x*p1 - p0) / (x*x - 1)
		alphas[i] = (x + 1) / 2
		weights[i] = 1 / ((1 - x*x) * dp * dp)
	}
	return alphas, weights
}
