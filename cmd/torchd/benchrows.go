package main

import (
	"sync"

	"github.com/torchd/torchd/handlers"
)

// batchRows is one batch's memory as the daemon lends it (core/rows.go): request i of the
// batch preprocesses into row i, so that the batch runs where it lies, without the copy
// that would stack it. Its memory is allocated at the first row asked, for that row's size.
type batchRows struct {
	n    int
	once sync.Once
	mem  []byte
	size int
}

// reuse readies r for a batch of n, keeping its memory where it is large enough.
func (r *batchRows) reuse(n int) {
	mem := r.mem
	*r = batchRows{n: n}
	r.mem = mem
}

// request is b's request with row i of r to preprocess into.
func (r *batchRows) request(b *modelBench, i int) *handlers.Request {
	req := b.request()
	req.Row = func(size int) ([]byte, func()) {
		r.once.Do(func() {
			r.size = size
			if cap(r.mem) < r.n*size {
				r.mem = make([]byte, r.n*size)
			}
		})
		if size != r.size {
			return nil, nil
		}
		return r.mem[i*size : (i+1)*size], func() {}
	}
	return req
}
