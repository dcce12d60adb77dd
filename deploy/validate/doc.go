// Package validate checks torchd's deployment manifests (deploy/kubernetes, deploy/kserve)
// without a cluster: every YAML document is decoded strictly, as the API server's strict
// field validation would, into the upstream Go types of its kind, so that a misspelled or
// misplaced field fails the tests instead of being silently dropped by kubectl apply.
//
// Kubernetes kinds decode into k8s.io/api. KServe's own Go module is not used: its API
// packages pull in about 1,400 packages (cloud storage SDKs, KEDA, Knative, controller-
// runtime) and took ten minutes to compile here. KServe kinds instead decode into the
// mirror in kserve_types.go, and are also checked against KServe's published CRD schemas,
// read at test time from KServe's module (config/crd/full at KServeVersion, fetched through
// the module proxy, nothing of it compiled or committed), which reject unknown fields at
// every depth the way the API server's pruning does.
//
// The tests also check what ties the manifests to torchd: the keys of torchd.toml and the
// flags in container args are torchd settings (read from daemon/config.go), the grace period
// covers the preStop sleep plus shutdown_timeout, probes use torchd's health endpoints, and
// the selectors and references between objects line up.
//
// This is its own Go module so that k8s.io/api stays out of the daemon's go.mod.
package validate
