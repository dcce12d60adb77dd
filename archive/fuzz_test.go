package archive

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// fuzzSeed is one starting input of FuzzOpen.
type fuzzSeed struct {
	name string
	data []byte
	tgz  bool
}

// fuzzSeeds are valid archives of each layout plus the attacks of
// TestOpenMalicious, so the fuzzer starts from every reader path.
func fuzzSeeds(tb testing.TB) []fuzzSeed {
	manifest := manifestJSON(`{"modelName":"m","serializedFile":"model.pt","handler":"tensor","configFile":"model-config.yaml"}`)
	var tsTar []tarEntry
	for _, f := range tsFiles {
		tsTar = append(tsTar, tarEntry{name: "resnet-18/" + f.name, data: f.data})
	}
	return []fuzzSeed{
		{"mar-minimal", validMAR(tb), false},
		{"mar-torchserve", makeZip(tb, tsFiles...), false},
		{"mar-toml", makeZip(tb, zipEntry{name: "model.pt", data: fakeTorchScript}, zipEntry{name: ConfigTOML, data: exampleTOML},
			zipEntry{name: "model-config.yaml", data: "batchSize: 2\n"}, zipEntry{name: LabelsFile, data: `{"0": "a"}`},
			zipEntry{name: ManifestPath, data: manifest}), false},
		{"mar-zip-slip", makeZip(tb, zipEntry{name: "../evil", data: "x"}), false},
		{"mar-symlink", makeZip(tb, zipEntry{name: "model.pt", data: "weights/model.pt", mode: 0o777 | fs.ModeSymlink}), false},
		{"mar-duplicate", makeZip(tb, zipEntry{name: "a", data: "1"}, zipEntry{name: "a", data: "2"}), false},
		{"tgz-torchserve", makeTarGz(tb, tsTar...), true},
		{"tgz-flat-toml", makeTarGz(tb, tarEntry{name: "./", typ: '5'}, tarEntry{name: "./model.pt", data: fakeTorchScript},
			tarEntry{name: "./" + ConfigTOML, data: "handler = \"tensor\"\n[[inputs]]\nname = \"x\"\ndtype = \"int64\"\nshape = [-1]\n"}), true},
		{"tgz-links", makeTarGz(tb, tarEntry{name: "m/w/model.pt", data: fakeTorchScript}, tarEntry{name: "m/model.pt", typ: '2', link: "w/model.pt"},
			tarEntry{name: "m/copy.pt", typ: '1', link: "m/w/model.pt"}, tarEntry{name: "m/" + ManifestPath, data: manifest}), true},
		{"tgz-symlink-escape", makeTarGz(tb, tarEntry{name: "here", typ: '2', link: "."}, tarEntry{name: "up", typ: '2', link: "here/.."}), true},
		{"tgz-device", makeTarGz(tb, tarEntry{name: "m/null", typ: '3'}), true},
	}
}

// FuzzOpen feeds arbitrary bytes to Open as a .mar or a .tar.gz. Whatever
// the input, Open must not panic, a failed Open must leave nothing behind,
// and a model it accepts must lie wholly inside its directory and vanish on
// Close. CI runs it for a while:
//
//	go test -run='^$' -fuzz=FuzzOpen -fuzztime=10s ./archive/
func FuzzOpen(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s.data, s.tgz)
	}
	limits := Limits{MaxTotalBytes: 2 << 20, MaxFileBytes: 1 << 20, MaxFiles: 64}
	// One directory per worker process, reused: Open's own MkdirTemp and
	// RemoveAll already cost most of an execution.
	dir := f.TempDir()
	tmp := filepath.Join(dir, "extract")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte, tgz bool) {
		name := "m.mar"
		if tgz {
			name = "m.tar.gz"
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		m, err := Open(p, WithTempDir(tmp), WithLimits(limits))
		if err != nil {
			if left := dirEntries(t, tmp); len(left) != 0 {
				t.Fatalf("failed Open (%v) left %q", err, left)
			}
			return
		}
		realTmp, err := filepath.EvalSymlinks(tmp)
		if err != nil {
			t.Fatal(err)
		}
		var total int64
		for _, f := range append(m.Files, File{Name: m.SerializedFile}) {
			fp, err := m.Path(f.Name)
			if err != nil {
				t.Fatalf("listed file %q: %v", f.Name, err)
			}
			real, err := filepath.EvalSymlinks(fp)
			if err != nil {
				t.Fatalf("listed file %q: %v", f.Name, err)
			}
			if rel, err := filepath.Rel(realTmp, real); err != nil || !filepath.IsLocal(rel) {
				t.Fatalf("file %q resolves to %s, outside %s", f.Name, real, realTmp)
			}
			total += f.Size
		}
		if m.Config.Handler == "" || !IsHandlerName(m.Config.Handler) {
			t.Fatalf("accepted handler %q", m.Config.Handler)
		}
		if err := m.Close(); err != nil {
			t.Fatal(err)
		}
		if left := dirEntries(t, tmp); len(left) != 0 {
			t.Fatalf("Close left %q", left)
		}
	})
}

// FuzzParseModelConfig feeds arbitrary text to the TOML and YAML config
// parsers, which must not panic and must report failures as *ConfigError.
//
//	go test -run='^$' -fuzz=FuzzParseModelConfig -fuzztime=10s ./archive/
func FuzzParseModelConfig(f *testing.F) {
	f.Add([]byte(exampleTOML), false)
	f.Add([]byte("batch_size = \"8\"\n[[inputs]]\nname = 1\n"), false)
	f.Add([]byte(tsFiles[2].data), true)
	f.Add([]byte("handler:\n  top_k: 3\nminWorkers: -1\n"), true)
	f.Fuzz(func(t *testing.T, data []byte, yaml bool) {
		name := ConfigTOML
		if yaml {
			name = ConfigYAML
		}
		c, err := ParseModelConfig(name, data)
		if err != nil {
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.File != name {
				t.Fatalf("error %v is not a *ConfigError for %s", err, name)
			}
			return
		}
		if c.Handler != "" && !IsHandlerName(c.Handler) {
			t.Fatalf("accepted handler %q", c.Handler)
		}
		if c.BatchSize.V < 0 || c.MinWorkers.V < 0 || c.MaxWorkers.V < 0 || c.JobQueueSize.V < 0 || c.Threads.V < 0 ||
			c.ResponseTimeout.V < 0 || c.StartupTimeout.V < 0 || c.MaxBatchDelay.V < 0 {
			t.Fatalf("accepted a negative value: %+v", c)
		}
		for _, s := range append(c.Inputs, c.Outputs...) {
			if s.Name == "" || !validDType(s.DType) {
				t.Fatalf("accepted tensor spec %+v", s)
			}
		}
	})
}

// TestWriteFuzzCorpus regenerates testdata/fuzz/FuzzOpen from fuzzSeeds when
// TORCHD_WRITE_FUZZ_CORPUS=1; otherwise it checks the corpus is there.
func TestWriteFuzzCorpus(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzOpen")
	seeds := fuzzSeeds(t)
	if os.Getenv("TORCHD_WRITE_FUZZ_CORPUS") != "1" {
		for _, s := range seeds {
			if _, err := os.Stat(filepath.Join(dir, s.name)); err != nil {
				t.Errorf("seed missing (run with TORCHD_WRITE_FUZZ_CORPUS=1): %v", err)
			}
		}
		return
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, s := range seeds {
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%s)\nbool(%v)\n", strconv.Quote(string(s.data)), s.tgz)
		if err := os.WriteFile(filepath.Join(dir, s.name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
