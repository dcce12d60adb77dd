// Command gencrd writes KServe's CRD schemas into ../testdata/kserve-crds, one gzipped JSON
// object of version → openAPIV3Schema per kind, without descriptions. It takes the CRDs from
// the KServe Go module at the given version (config/crd/full), which the go command fetches
// from the module proxy and checks against the checksum database; nothing is compiled.
//
//	cd deploy/validate && go run ./internal/gencrd -version v0.17.0
package main

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"

	"sigs.k8s.io/yaml"
)

var crds = map[string]string{
	"servingruntimes":        "serving.kserve.io_servingruntimes.yaml",
	"clusterservingruntimes": "serving.kserve.io_clusterservingruntimes.yaml",
	"inferenceservices":      "serving.kserve.io_inferenceservices.yaml",
}

func main() {
	version := flag.String("version", "v0.17.0", "KServe module version")
	out := flag.String("out", "testdata/kserve-crds", "output directory")
	flag.Parse()

	cmd := exec.Command("go", "mod", "download", "-json", "github.com/kserve/kserve@"+*version)
	cmd.Dir = os.TempDir() // outside any module: the download must not touch go.mod
	cmd.Stderr = os.Stderr
	b, err := cmd.Output()
	if err != nil {
		log.Fatalf("go mod download: %v", err)
	}
	var mod struct{ Dir, Sum string }
	if err := json.Unmarshal(b, &mod); err != nil {
		log.Fatal(err)
	}
	for name, file := range crds {
		y, err := os.ReadFile(filepath.Join(mod.Dir, "config", "crd", "full", file))
		if err != nil {
			log.Fatal(err)
		}
		var crd struct {
			Spec struct {
				Versions []struct {
					Name   string
					Schema struct {
						OpenAPIV3Schema any `json:"openAPIV3Schema"`
					}
				}
			}
		}
		if err := yaml.Unmarshal(y, &crd); err != nil {
			log.Fatalf("%s: %v", file, err)
		}
		schemas := map[string]any{}
		for _, v := range crd.Spec.Versions {
			schemas[v.Name] = stripDescriptions(v.Schema.OpenAPIV3Schema)
		}
		j, err := json.Marshal(schemas)
		if err != nil {
			log.Fatal(err)
		}
		var gz bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&gz, gzip.BestCompression)
		zw.Write(j)
		zw.Close()
		path := filepath.Join(*out, name+".json.gz")
		if err := os.WriteFile(path, gz.Bytes(), 0o644); err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s: %d versions, %d bytes\n", path, len(schemas), gz.Len())
	}
	note := fmt.Sprintf("KServe's CRD schemas (config/crd/full of github.com/kserve/kserve@%s, %s),\n"+
		"descriptions removed. Apache-2.0, The KServe Authors. Regenerate with\n"+
		"`go run ./internal/gencrd -version %s` in deploy/validate.\n", *version, mod.Sum, *version)
	if err := os.WriteFile(filepath.Join(*out, "SOURCE"), []byte(note), 0o644); err != nil {
		log.Fatal(err)
	}
}

// stripDescriptions drops the schema's description strings; a property that happens to be
// called "description" is an object here and stays.
func stripDescriptions(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, e := range x {
			if _, isString := e.(string); k == "description" && isString {
				continue
			}
			out[k] = stripDescriptions(e)
		}
		return out
	case []any:
		for i := range x {
			x[i] = stripDescriptions(x[i])
		}
		return x
	}
	return v
}
