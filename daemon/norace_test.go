//go:build !race

package daemon_test

// raceBuild is set when the tests run under -race (race_test.go).
const raceBuild = false
