package core

import "sync"

// A batch of images is stacked into one input before its forward: for ResNet-18's 32 images,
// 19 MB copied in about 3 ms ahead of a 33 ms forward on an AMX Xeon. Rows avoid the copy:
// the window numbers its places in arrival order, and the batcher queues and batches them in
// that order, so consecutive places are given consecutive rows of one buffer (a slab) to
// preprocess into, and a batch of them already lies as its forward reads it
// (handlers.Stage.Stack runs it in place). A batch ends where its slab does.

// slab is the memory of rows consecutive window places, from start: place start+k's input
// is row k. Its memory is allocated at the first row asked of it, for that row's size.
type slab struct {
	start, end uint64 // its places: [start, end)

	once     sync.Once
	rowBytes int
	mem      []byte

	// Held by the window's mu:
	lent     int  // rows lent and not yet given back
	resolved bool // every place of it resolved: no row will be asked of it again
}

// setRows makes the slabs begun from now on hold n rows (a model's batch size); a batch of
// one has no slab: it runs on its own memory anyway.
func (w *inputWindow) setRows(n int) {
	w.mu.Lock()
	w.rows = n
	w.mu.Unlock()
}

// placeSlab gives place n, just taken, its slab: the current one, or a new one from n;
// w.mu is held.
func (w *inputWindow) placeSlab(n uint64) {
	if w.rows < 2 {
		w.slab = nil
		return
	}
	if w.slab == nil || n >= w.slab.end {
		w.slab = &slab{start: n, end: n + uint64(w.rows)}
		w.slabs = append(w.slabs, w.slab)
	}
}

// row lends place n its row of size bytes, and returns its slab; nil when the place has no
// slab, or its slab's rows are of another size (a request of several images among single
// ones).
func (w *inputWindow) row(n uint64, size int) ([]byte, *slab) {
	if size <= 0 {
		return nil, nil
	}
	w.mu.Lock()
	var s *slab
	for _, c := range w.slabs {
		if n >= c.start && n < c.end {
			s = c
			break
		}
	}
	if s == nil {
		w.mu.Unlock()
		return nil, nil
	}
	s.lent++
	w.mu.Unlock()
	s.once.Do(func() {
		s.rowBytes = size
		s.mem = w.mems.get(int(s.end-s.start) * size)
	})
	if size != s.rowBytes {
		w.giveRow(s)
		return nil, nil
	}
	off := int(n-s.start) * size
	// The capacity runs on to the slab's end: that is how Stack sees the rows adjoin.
	return s.mem[off : off+size], s
}

// giveRow gives back a row of s; its memory goes back to the pool when it was the last
// and no place of s is unresolved.
func (w *inputWindow) giveRow(s *slab) {
	w.mu.Lock()
	s.lent--
	var mem []byte
	if s.lent == 0 && s.resolved {
		mem = s.mem
	}
	w.mu.Unlock()
	w.recycle(mem)
}

// releaseIdle drops the memory of the slab that new places go to, unless a row of it is
// lent: a model that has idled (its workers' idleRelease) should not keep a batch's worth of
// inputs. The slab's remaining places take pooled buffers; the next slab allocates anew.
func (w *inputWindow) releaseIdle() {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.slab
	if s == nil || s.lent > 0 {
		return
	}
	s.mem = nil
	w.slab = nil
	// Out of the list: its remaining places find no slab, and the next slab's places, which
	// may share its range, find theirs.
	for i, c := range w.slabs {
		if c == s {
			w.slabs = append(w.slabs[:i], w.slabs[i+1:]...)
			break
		}
	}
}

// holdsSlab reports whether the slab new places go to holds memory.
func (w *inputWindow) holdsSlab() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	// once.Do sets mem outside the lock, but only after a row was counted lent.
	return w.slab != nil && (w.slab.lent > 0 || w.slab.mem != nil)
}

// recycle puts a slab's memory (nil: none) back in the pool.
func (w *inputWindow) recycle(mem []byte) {
	if mem == nil {
		return
	}
	w.recycled.Add(1)
	w.mems.put(mem)
}

// resolveSlabs marks the slabs whose places are all resolved (head passed their end): no
// row is asked of them any more, so each goes back to the pool once its rows are; w.mu is
// held.
func (w *inputWindow) resolveSlabs() {
	k := 0
	for k < len(w.slabs) && w.slabs[k].end <= w.head {
		s := w.slabs[k]
		s.resolved = true
		if s.lent == 0 {
			w.recycle(s.mem)
		}
		w.slabs[k] = nil
		k++
	}
	if k > 0 {
		w.slabs = append(w.slabs[:0], w.slabs[k:]...)
	}
}

// slabMemory pools slabs' memory, so that a batch's rows are neither zeroed nor faulted in
// again; the garbage collector empties it when the model idles.
type slabMemory struct{ p sync.Pool }

func (m *slabMemory) get(n int) []byte {
	if b, ok := m.p.Get().(*[]byte); ok && cap(*b) >= n {
		return (*b)[:n]
	}
	return make([]byte, n)
}

func (m *slabMemory) put(b []byte) { m.p.Put(&b) }
