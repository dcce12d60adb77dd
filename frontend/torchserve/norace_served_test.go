//go:build !race

package torchserve_test

const raceBuild = false
