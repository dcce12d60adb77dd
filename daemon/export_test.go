package daemon

// Hooks into the engine for the end-to-end tests of package daemon_test.

// ShareCores makes the forwards of models registered from now on share n cores.
func ShareCores(d *Daemon, n int) { d.Registry.cores = newCoreShare(n) }

// OnForward calls f on the worker's thread before each of v's batched forwards, with the
// intra-op threads LibTorch reports there.
func OnForward(v *ModelVersion, f func(threads int)) { v.pool.onForward.Store(&f) }

// WindowStats returns v's window: places held now, the most held at once, the requests that
// waited for one, and its size.
func WindowStats(v *ModelVersion) (held, peak, waited, size int) {
	held, peak, waited = v.batcher.win.stats()
	v.batcher.win.mu.Lock()
	defer v.batcher.win.mu.Unlock()
	return held, peak, waited, v.batcher.win.limit
}
