// Package soak holds the soak test (`make soak`): the real torchd binary under mixed load
// and hostile registrations for as long as TORCHD_SOAK says, sampled for growth, and the
// registration churn's memory checks. It has no code of its own; the tests are the package.
package soak
