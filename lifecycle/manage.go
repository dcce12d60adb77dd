package lifecycle

import (
	"errors"
	"fmt"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/core"
)

// Management of archives' versions: register, scale, unregister and set the default, as
// TorchServe's management API (REST and gRPC) and the model store's control call them. Each
// change is written to the snapshot.

// badParam is a management call's bad parameter.
func badParam(format string, args ...any) error {
	return &core.Error{Kind: core.ErrBadInput, Msg: fmt.Sprintf(format, args...)}
}

// Registration is a register call, its parameters read by the protocol.
type Registration struct {
	URL string
	// URLGiven tells an empty url (looked up in the model store and not found, as TorchServe
	// answers it) from none (a bad request).
	URLGiven               bool
	Name, Handler, Runtime string
	Settings               archive.Settings // the registration's layer
	Defaults               archive.Settings // the protocol's defaults (core.RegisterRequest.Defaults)
	Synchronous            bool
}

// Registered is what a registration did.
type Registered struct {
	Name, Version string
	Workers       int // 0: registered without workers, which scaling adds
	Synchronous   bool
}

// Register loads a model version and records it in the snapshot.
func (s *Service) Register(r Registration) (Registered, error) {
	if r.URLGiven && r.URL == "" {
		// TorchServe looks an empty url up in the model store, and finds nothing.
		return Registered{}, &core.Error{Kind: core.ErrModelNotFound, Msg: "Model not found in model store: "}
	}
	if r.Runtime != "" && r.Runtime != "python" && r.Runtime != "python3" && r.Runtime != "torchscript" {
		return Registered{}, badParam("Invalid RuntimeType value: %s", r.Runtime)
	}
	v, err := s.open(core.RegisterRequest{URL: r.URL, Name: r.Name, Handler: r.Handler, Runtime: r.Runtime,
		Settings: r.Settings, Defaults: r.Defaults, Synchronous: r.Synchronous, Persist: true})
	if err != nil {
		return Registered{}, err
	}
	s.served(v.Name, v.Version) // registered again: no longer failed
	s.saveSnapshot()
	return Registered{Name: v.Name, Version: v.Version, Workers: v.Settings().MinWorkers, Synchronous: r.Synchronous}, nil
}

// served forgets why a version that now serves did not; a start-up model's failure stays,
// as the server's health does not come back.
func (s *Service) served(name, version string) {
	s.records.mu.Lock()
	defer s.records.mu.Unlock()
	if rec, ok := s.records.m[[2]string{name, version}]; ok && !rec.Startup {
		delete(s.records.m, [2]string{name, version})
	}
}

// Scaling is a scale-workers call. An unset Min is 1 and an unset Max is Min, as TorchServe's.
type Scaling struct {
	Name, Version string
	Min, Max      archive.Value[int]
	Synchronous   bool
}

// Scaled is what a scaling did.
type Scaled struct {
	Name, Version string
	Workers       int
	VersionGiven  bool // the call named the version, and the answer names it
	Synchronous   bool
}

// Scale sets a version's workers.
func (s *Service) Scale(sc Scaling) (Scaled, error) {
	minW, maxW := 1, 0
	if sc.Min.Set {
		minW = sc.Min.V
	}
	if sc.Max.Set {
		maxW = sc.Max.V
	} else {
		maxW = minW
	}
	if maxW < minW {
		return Scaled{}, badParam("max_worker cannot be less than min_worker.")
	}
	// TorchServe checks only the order and that the model exists: a negative count then
	// fails inside its scaling, which answers 500. So does torchd, with a message that says
	// why; it has no core kind, as no model or request is at fault but the call's.
	for _, p := range []struct {
		key string
		n   int
	}{{"min_worker", minW}, {"max_worker", maxW}} {
		if p.n < 0 {
			if _, err := s.reg.Get(sc.Name, sc.Version); err != nil {
				return Scaled{}, err
			}
			return Scaled{}, fmt.Errorf("Parameter %s must be an integer ≥ 0, got %d", p.key, p.n)
		}
	}
	v, err := s.reg.Scale(sc.Name, sc.Version, minW, maxW, sc.Synchronous)
	if err != nil {
		return Scaled{}, err
	}
	s.saveSnapshot()
	return Scaled{Name: v.Name, Version: v.Version, Workers: minW, VersionGiven: sc.Version != "", Synchronous: sc.Synchronous}, nil
}

// Unregister removes a version ("": the default) once its accepted requests are answered, or
// a registration that failed to restore.
func (s *Service) Unregister(name, version string) error {
	if err := s.reg.Unregister(name, version); err != nil {
		notFound := errors.Is(err, core.ErrModelNotFound) || errors.Is(err, core.ErrVersionNotFound)
		if !(notFound && s.records.removeRestores(name, version)) {
			return err
		}
	}
	s.saveSnapshot()
	// The module and its workers are freed: give their memory back now, rather than let
	// registration churn grow the process in steps of the allocator's padding.
	if s.unregistered != nil {
		s.unregistered()
	}
	return nil
}

// SetDefault makes a version the default.
func (s *Service) SetDefault(name, version string) error {
	if err := s.reg.SetDefault(name, version); err != nil {
		return err
	}
	s.saveSnapshot()
	return nil
}
