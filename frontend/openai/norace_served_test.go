//go:build !race

package openai_test

const raceBuild = false
