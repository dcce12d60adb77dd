package handlerproc

import (
	"fmt"
	"sync"
)

// A model's processes follow its workers: scaling up starts processes, scaling down stops
// them (an idle one at once, a busy one when its batch ends), and scaling to 0 leaves none
// running. A model registered with no workers starts no process, as TorchServe starts no
// worker for it: a handler that cannot load (a name no module has, a syntax error) is
// accepted then, and fails when workers are added.

// SetProcesses scales the model to n processes, and returns the first start's error (the
// handler's own Python error where it printed one); the processes that started serve.
func (m *Model) SetProcesses(n int) error {
	if n < 0 || n > maxProcesses {
		return fmt.Errorf("a model runs 0 to %d handler processes, not %d", maxProcesses, n)
	}
	m.startMu.Lock()
	defer m.startMu.Unlock()
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return errClosed
	}
	m.want = n
	have := len(m.live) + m.restarting
	m.mu.Unlock()
	for ; have > n; have-- {
		select {
		case <-m.idle.ready:
			p := m.idle.takeOldest()
			m.mu.Lock()
			delete(m.live, p)
			m.mu.Unlock()
			go p.kill()
		default: // the rest are busy: each stops when its batch ends (release)
			return nil
		}
	}
	if have >= n {
		return nil
	}
	errs := make(chan error, n-have)
	var wg sync.WaitGroup
	for range n - have {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := m.start()
			if err == nil {
				m.idle.put(p)
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	var first error
	for err := range errs {
		first = cmp(first, err)
	}
	return first
}

// StartWorkers starts a process for a model that has none: SetProcesses(1) unless more are
// wanted already.
func (m *Model) StartWorkers() error {
	m.mu.Lock()
	n := max(1, m.want)
	m.mu.Unlock()
	return m.SetProcesses(n)
}

// ProcessCount is how many processes run now, restarts in progress included.
func (m *Model) ProcessCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.live) + m.restarting
}
