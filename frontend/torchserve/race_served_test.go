//go:build race

package torchserve_test

// raceBuild is set under -race. The differential test against TorchServe runs forwards in
// C++ and Python, which the race detector does not see, for minutes: it runs in make test's
// plain pass (SERVED_GATES).
const raceBuild = true
