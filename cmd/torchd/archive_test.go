package main

import (
	"bytes"
	"slices"
	"testing"

	"github.com/torchd/torchd/archive"
)

// What `torchd archive inspect` prints of a config is a model-config.toml that reads back to
// the same settings, lists included.
func TestPrintedConfigReadsBack(t *testing.T) {
	in := "handler = \"tensor\"\nbatch_size = 8\npreferred_batch_size = [4, 8]\ndevice = \"cuda\"\ndevice_ids = [0, 1]\nforward_batch = 4\n"
	c, err := archive.ParseModelConfig(archive.ConfigTOML, []byte(in))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := printConfig(&out, c); err != nil {
		t.Fatal(err)
	}
	back, err := archive.ParseModelConfig(archive.ConfigTOML, out.Bytes())
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !slices.Equal(back.PreferredBatchSize, []int{4, 8}) || !slices.Equal(back.DeviceIDs, []int{0, 1}) ||
		back.BatchSize != archive.Fixed(8) || back.ForwardBatch != archive.Fixed(4) || back.Device != archive.Of("cuda") {
		t.Fatalf("read back %+v from\n%s", back, out.String())
	}
}
