package main

import (
	"fmt"
	"runtime"

	"github.com/torchd/torchd/frontend"
	"github.com/torchd/torchd/torch"
)

// Version is torchd's version, set at link time with -X main.Version=....
var Version = "0.1.0-dev"

func init() {
	frontend.Version = Version
	commands["version"] = command{"print the versions of torchd, Go and LibTorch", func([]string) error {
		fmt.Printf("torchd %s (%s, LibTorch %s, CUDA available: %v, devices: %d, intra-op threads: %d)\n",
			Version, runtime.Version(), torch.Version(), torch.CUDAAvailable(), torch.CUDADeviceCount(), torch.NumThreads())
		return nil
	}}
}
