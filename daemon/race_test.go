//go:build race

package daemon_test

// raceBuild is set when the tests run under -race: TestMain builds torchd with -race too, and
// a server that reports a data race fails its test (server.stop).
const raceBuild = true
