//go:build !race

package vision_test

const raceBuild = false
