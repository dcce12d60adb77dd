//go:build race

package vision_test

// raceBuild is set under -race. The served models' gates run hundreds of forwards, C++ and C
// that the race detector does not see: they run in make test's plain pass (SERVED_GATES).
const raceBuild = true
