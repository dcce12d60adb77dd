//go:build !race

package handlers_test

const raceBuild = false
