package libtorch_test

import (
	"testing"

	"github.com/torchd/torchd/internal/zootest"
)

func topKOf(t testing.TB, r response) zootest.TopK {
	t.Helper()
	return zootest.TopKOf(t, r.status, r.body)
}
