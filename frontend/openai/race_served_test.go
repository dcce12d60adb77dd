//go:build race

package openai_test

// raceBuild is set under -race. The gate against sentence-transformers runs a forward a
// reference text, C++ that the race detector does not see: it runs in make test's plain pass
// (SERVED_GATES).
const raceBuild = true
