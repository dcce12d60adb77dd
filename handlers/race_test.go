//go:build race

package handlers_test

// raceBuild is set under -race. The accuracy gates run forwards over a hundred photos: the
// race detector sees none of that C++ and C, so they run in the plain pass only.
const raceBuild = true
