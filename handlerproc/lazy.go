package handlerproc

// A model registered with no workers starts no process, as TorchServe starts no worker for
// it: a handler that cannot load (a name no module has, a syntax error) is accepted then,
// and fails when workers are added. StartWorkers is that moment.

// StartWorkers starts a process for a model that has none, before the core adds workers to
// it, and returns the start's error: the handler's own Python error where it printed one.
// A model with a live process has nothing to do.
func (m *Model) StartWorkers() error {
	m.startMu.Lock()
	defer m.startMu.Unlock()
	m.mu.Lock()
	running, closed := len(m.live) > 0, m.closed
	m.mu.Unlock()
	if running || closed {
		return nil
	}
	p, err := m.start()
	if err != nil {
		return err
	}
	select {
	case m.idle <- p:
	default: // a restart filled the place meanwhile
		m.mu.Lock()
		delete(m.live, p)
		m.mu.Unlock()
		go p.kill()
	}
	return nil
}
