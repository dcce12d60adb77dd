package daemon

import "github.com/torchd/torchd/repository"

// The Triton repository's names, as the configuration and the front-ends' tests use them;
// the repository itself (its loads, unloads, polls and index) is package repository.
const (
	ControlNone     = repository.ControlNone
	ControlExplicit = repository.ControlExplicit
	ControlPoll     = repository.ControlPoll
)

// RepositoryModel is one entry of the repository index.
type RepositoryModel = repository.Model
