package archive_test

import (
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/torchd/torchd/archive"
)

// Build a .mar as `torchd archive` does, then open it as the daemon does.
func Example() {
	dir, err := os.MkdirTemp("", "archive-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	model := filepath.Join(dir, "resnet18.pt") // made by torch.jit.save in real life
	if err := os.WriteFile(model, []byte("TorchScript"), 0o644); err != nil {
		log.Fatal(err)
	}
	config := filepath.Join(dir, "model-config.toml")
	if err := os.WriteFile(config, []byte("batch_size = 8\n[options]\ntop_k = 3\n"), 0o644); err != nil {
		log.Fatal(err)
	}

	mar, err := archive.Write(archive.WriteOptions{
		ModelName:      "resnet-18",
		SerializedFile: model,
		Handler:        "image_classifier",
		ConfigFile:     config,
		ExportPath:     dir,
	})
	if err != nil {
		log.Fatal(err)
	}

	m, err := archive.Open(mar)
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close() // removes the extracted files

	c := m.Config
	topK, _ := c.IntOption("top_k", 5)
	fmt.Println(m.Name, m.Version, c.Handler, m.SerializedFile)
	// What the config does not set is left to the server (core.Resolve).
	fmt.Println(c.BatchSize, c.MaxBatchDelay, topK)
	// Output:
	// resnet-18 1.0 image_classifier resnet18.pt
	// 8 unset 3
}
