package frontend

import (
	"errors"

	"github.com/torchd/torchd/core"
)

// KindTable is one protocol's answers to the core's error kinds (core.Kinds): each
// front-end has one, and frontend's tests check that each covers every kind. A is the
// protocol's answer (a status, a status and an exception name, a gRPC code).
type KindTable[A any] []KindAnswer[A]

// KindAnswer is a kind and the protocol's answer to it.
type KindAnswer[A any] struct {
	Kind   error
	Answer A
}

// Of is the answer to err's kind, the first entry err is (errors.Is); false: err has no kind.
func (t KindTable[A]) Of(err error) (A, bool) {
	for _, k := range t {
		if errors.Is(err, k.Kind) {
			return k.Answer, true
		}
	}
	var zero A
	return zero, false
}

// Missing lists the kinds of core.Kinds that t has no entry for.
func (t KindTable[A]) Missing() []error {
	var out []error
	for _, kind := range core.Kinds {
		found := false
		for _, k := range t {
			if k.Kind == kind {
				found = true
				break
			}
		}
		if !found {
			out = append(out, kind)
		}
	}
	return out
}
