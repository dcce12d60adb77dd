package archive

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// The files of a TorchServe image classifier archive, as
// torch-model-archiver --model-name resnet-18 --version 1.0
// --serialized-file resnet18.pt --handler image_classifier
// --extra-files index_to_name.json --config-file model-config.yaml lays them out.
var tsFiles = []zipEntry{
	{name: "resnet18.pt", data: fakeTorchScript},
	{name: "index_to_name.json", data: `{"0": ["n01440764", "tench"], "1": ["n01443537", "goldfish"]}`},
	{name: "model-config.yaml", data: "minWorkers: 1\nmaxWorkers: 2\nbatchSize: 4\nmaxBatchDelay: 50\nresponseTimeout: 30\ndeviceType: gpu\ndeviceIds: [0, 1]\njobQueueSize: 10\npt2: {backend: inductor}\n"},
	{name: ManifestPath, data: tsManifest}, // written last, as the archiver does
}

func checkTorchServeModel(t *testing.T, m *Model) {
	t.Helper()
	if m.Name != "resnet-18" || m.Version != "1.0" {
		t.Errorf("name, version = %q, %q; want resnet-18, 1.0", m.Name, m.Version)
	}
	if m.Config.Handler != "image_classifier" {
		t.Errorf("handler = %q", m.Config.Handler)
	}
	if !m.HasManifest || m.Manifest.ArchiverVersion != "0.12.0" || m.Manifest.CreatedOn != "28/07/2020 06:32:08" {
		t.Errorf("manifest = %+v", m.Manifest)
	}
	data, err := os.ReadFile(m.SerializedPath())
	if err != nil || string(data) != fakeTorchScript {
		t.Errorf("serialized file: %q, %v", data, err)
	}
	if m.Labels[0] != "tench" || m.Labels[1] != "goldfish" || len(m.Labels) != 2 {
		t.Errorf("labels = %v", m.Labels)
	}
	want := ModelConfig{
		File: "model-config.yaml", Handler: "image_classifier",
		Settings: Settings{
			MinWorkers: Fixed(1), MaxWorkers: Of(2), BatchSize: Fixed(4), MaxBatchDelay: Fixed(50 * time.Millisecond),
			ResponseTimeout: Of(30 * time.Second), Device: Of("cuda"), JobQueueSize: Of(10),
		},
		DeviceIDs: []int{0, 1},
		Options:   map[string]any{"pt2": map[string]any{"backend": "inductor"}},
	}
	if !reflect.DeepEqual(m.Config, want) {
		t.Errorf("config =\n%+v\nwant\n%+v", m.Config, want)
	}
	var names []string
	for _, f := range m.Files {
		names = append(names, f.Name)
	}
	wantNames := []string{ManifestPath, "index_to_name.json", "model-config.yaml", "resnet18.pt"}
	if !reflect.DeepEqual(names, wantNames) {
		t.Errorf("files = %q, want %q", names, wantNames)
	}
}

// A .mar laid out exactly as torch-model-archiver lays it out loads.
func TestOpenTorchServeMAR(t *testing.T) {
	tmp := t.TempDir()
	p := writeTemp(t, "resnet-18.mar", makeZip(t, tsFiles...))
	m, err := Open(p, WithTempDir(tmp))
	if err != nil {
		t.Fatal(err)
	}
	checkTorchServeModel(t, m)
	if m.Kind != KindMAR || !strings.HasPrefix(m.Dir, tmp) {
		t.Errorf("kind %q dir %q", m.Kind, m.Dir)
	}
	if fi, err := os.Stat(m.Dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("extraction dir mode: %v, %v", fi.Mode(), err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if left := dirEntries(t, tmp); len(left) != 0 {
		t.Errorf("Close left %q", left)
	}
	if err := m.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// --archive-format zip-store writes the same layout uncompressed.
func TestOpenTorchServeMARStored(t *testing.T) {
	var files []zipEntry
	for _, f := range tsFiles {
		f.store = true
		files = append(files, f)
	}
	m, err := Open(writeTemp(t, "resnet-18.mar", makeZip(t, files...)))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	checkTorchServeModel(t, m)
}

// --archive-format tgz puts every entry under resnet-18/, files only.
func TestOpenTorchServeTarGz(t *testing.T) {
	var entries []tarEntry
	for _, f := range tsFiles {
		entries = append(entries, tarEntry{name: "resnet-18/" + f.name, data: f.data})
	}
	for _, name := range []string{"resnet-18.tar.gz", "resnet-18.tgz"} {
		m, err := Open(writeTemp(t, name, makeTarGz(t, entries...)))
		if err != nil {
			t.Fatal(err)
		}
		checkTorchServeModel(t, m)
		if m.Kind != KindTarGz {
			t.Errorf("kind = %q", m.Kind)
		}
		m.Close()
	}
}

// A tar made with `tar -C dir -czf m.tgz .` has ./ names and no top directory.
func TestOpenTarGzWithoutTopDir(t *testing.T) {
	entries := []tarEntry{{name: "./", typ: '5'}, {name: "./MAR-INF/", typ: '5'}}
	for _, f := range tsFiles {
		entries = append(entries, tarEntry{name: "./" + f.name, data: f.data})
	}
	m, err := Open(writeTemp(t, "resnet-18.tar.gz", makeTarGz(t, entries...)))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	checkTorchServeModel(t, m)
}

// --archive-format no-archive: a directory, used in place and never removed.
func TestOpenDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "resnet-18")
	files := map[string]string{}
	for _, f := range tsFiles {
		files[f.name] = f.data
	}
	writeTree(t, dir, files)
	m, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	checkTorchServeModel(t, m)
	if m.Kind != KindDir || m.Dir != dir {
		t.Errorf("kind %q dir %q", m.Kind, m.Dir)
	}
	m.Close()
	if _, err := os.Stat(filepath.Join(dir, "resnet18.pt")); err != nil {
		t.Errorf("Close touched the directory: %v", err)
	}

	// As in TorchServe, a directory whose only entry is a directory is read from that.
	m, err = Open(filepath.Dir(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	checkTorchServeModel(t, m)
}

func TestOpenTorchScript(t *testing.T) {
	p := writeTemp(t, "squeezenet.pt", []byte(fakeTorchScript))
	m, err := Open(p, WithHandler("tensor"))
	if err != nil {
		t.Fatal(err)
	}
	if m.Kind != KindTorchScript || m.Name != "squeezenet" || m.Version != "1.0" || m.Config.Handler != "tensor" ||
		m.SerializedPath() != p || len(m.Files) != 1 || m.Files[0] != (File{"squeezenet.pt", int64(len(fakeTorchScript))}) {
		t.Errorf("model = %+v", m)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Errorf("Close removed the file: %v", err)
	}
	// Only the file itself belongs to the model, not its neighbours.
	writeTree(t, filepath.Dir(p), map[string]string{"secret.txt": "x"})
	if _, err := m.Path("secret.txt"); !errors.Is(err, ErrMissingFile) {
		t.Errorf("Path(neighbour) = %v, want ErrMissingFile", err)
	}

	_, err = Open(p)
	if !errors.Is(err, ErrUnsupportedHandler) || !strings.Contains(err.Error(), "image_classifier") {
		t.Errorf("no handler: %v", err)
	}
	_, err = Open(p, WithHandler("my_handler.py"))
	if !errors.Is(err, ErrUnsupportedHandler) {
		t.Errorf("custom handler: %v", err)
	}
}

// Without a manifest, a directory or .tar.gz is described by model-config.toml.
func TestOpenWithoutManifest(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{
		"model.pt":          fakeTorchScript,
		"vocab.txt":         "a\nb\n",
		"classes.txt":       "negative\npositive\n",
		"model-config.toml": "handler = \"text_classifier\"\n[options]\nvocabulary = \"vocab.txt\"\nlabel_file = \"classes.txt\"\n",
	})
	m, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if m.HasManifest || m.Name != filepath.Base(dir) || m.SerializedFile != "model.pt" || m.Config.Handler != "text_classifier" {
		t.Errorf("model = %+v", m)
	}
	if want := map[int]string{0: "negative", 1: "positive"}; !reflect.DeepEqual(m.Labels, want) {
		t.Errorf("labels = %v", m.Labels)
	}
	vocab, _ := m.Config.StringOption("vocabulary", "")
	if p, err := m.Path(vocab); err != nil || p != filepath.Join(dir, "vocab.txt") {
		t.Errorf("Path(vocabulary) = %q, %v", p, err)
	}

	// Two candidates: the config must name one.
	writeTree(t, dir, map[string]string{"other.pt": "x"})
	if _, err := Open(dir); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "serialized_file") {
		t.Errorf("two .pt files: %v", err)
	}
	writeTree(t, dir, map[string]string{"model-config.toml": "handler = \"text_classifier\"\nserialized_file = \"other.pt\"\n"})
	m, err = Open(dir)
	if err != nil || m.SerializedFile != "other.pt" {
		t.Errorf("serialized_file: %v, %+v", err, m)
	}

	// The same as a .tar.gz.
	tgz := makeTarGz(t, tarEntry{name: "m/model.pt", data: fakeTorchScript}, tarEntry{name: "m/model-config.toml", data: `handler = "tensor"`})
	m, err = Open(writeTemp(t, "m.tar.gz", tgz))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.Name != "m" || m.Config.Handler != "tensor" || m.SerializedFile != "model.pt" {
		t.Errorf("model = %+v", m)
	}
}

// model-config.toml wins over the manifest, so one archive can carry a
// Python handler for TorchServe and a built-in one for torchd.
func TestOpenTOMLOverridesManifest(t *testing.T) {
	mar := makeZip(t,
		zipEntry{name: "model.pt", data: fakeTorchScript},
		zipEntry{name: "my_handler.py", data: "def handle(data, context): pass"},
		zipEntry{name: "model-config.yaml", data: "batchSize: 2\n"},
		zipEntry{name: ConfigTOML, data: "handler = \"image_classifier\"\nbatch_size = 8\n"},
		zipEntry{name: ManifestPath, data: manifestJSON(`{"modelName":"m","serializedFile":"model.pt","handler":"my_handler.py","configFile":"model-config.yaml"}`)},
	)
	m, err := Open(writeTemp(t, "m.mar", mar))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.Config.Handler != "image_classifier" || m.Config.BatchSize != Fixed(8) || m.Config.File != ConfigTOML {
		t.Errorf("config = %+v", m.Config)
	}
}

// An MMS manifest reads, and its Python handler runs in a handler process.
func TestOpenMMSManifest(t *testing.T) {
	mms := `{"specificationVersion":"1.0","implementationVersion":"1.0","description":"noop v1.0",
	  "modelServerVersion":"1.0","license":"Apache 2.0","runtime":"python",
	  "engine":{"engineName":"MXNet","engineVersion":"1.4.0"},
	  "model":{"modelName":"noop","description":"Tests for noop","modelVersion":"0.1","handler":"service:handle"},
	  "publisher":{"author":"MXNet SDK team","email":"noreply@amazon.com"}}`
	am, err := Open(writeTemp(t, "noop.mar", makeZip(t, zipEntry{name: "service.py"}, zipEntry{name: ManifestPath, data: mms})))
	if err != nil {
		t.Fatal(err)
	}
	defer am.Close()
	if am.Config.Handler != HandlerPython || am.PythonHandler != "service:handle" {
		t.Errorf("handler %q, python handler %q", am.Config.Handler, am.PythonHandler)
	}
	m, err := ParseManifest([]byte(mms))
	if err != nil || m.Engine.EngineName != "MXNet" || m.Publisher.Author != "MXNet SDK team" || m.Model.ModelVersion != "0.1" {
		t.Errorf("ParseManifest = %+v, %v", m, err)
	}
}

// What torchd does not serve is refused, naming what it supports.
func TestOpenUnsupported(t *testing.T) {
	for _, tc := range []struct {
		name, model string
		want        error
		key, msg    string
	}{
		{"custom handler module", `{"modelName":"m","serializedFile":"model.pt","handler":"my_handler"}`, ErrUnsupportedHandler, "model.handler", "torchd supports the built-in handlers"},
		{"builtin torchd lacks", `{"modelName":"m","serializedFile":"model.pt","handler":"keypoint_detector"}`, ErrUnsupportedHandler, "model.handler", `"keypoint_detector"`},
		{"no handler", `{"modelName":"m","serializedFile":"model.pt","handler":""}`, ErrUnsupportedHandler, "model.handler", "no handler"},
		{"tflite", `{"modelName":"m","serializedFile":"model.tflite","handler":"image_classifier"}`, ErrUnsupportedModel, "model.serializedFile", "TorchScript"},
		{"no serialized file", `{"modelName":"m","handler":"image_classifier"}`, ErrInvalidConfig, "model.serializedFile", "required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mar := makeZip(t,
				zipEntry{name: "model.pt", data: fakeTorchScript}, zipEntry{name: "model.tflite"}, zipEntry{name: "model.py"},
				zipEntry{name: ManifestPath, data: manifestJSON(tc.model)})
			_, err := Open(writeTemp(t, "m.mar", mar))
			var ce *ConfigError
			if !errors.Is(err, tc.want) || !errors.As(err, &ce) || ce.File != ManifestPath || ce.Key != tc.key || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("err = %v; want %v at %s containing %q", err, tc.want, tc.key, tc.msg)
			}
		})
	}
}

// What only TorchServe's Python can run resolves to the python handler, with the entry
// point TorchServe's worker imports.
func TestOpenPythonHandlers(t *testing.T) {
	for _, tc := range []struct{ name, model, config, entry string }{
		{"custom handler file", `{"modelName":"m","serializedFile":"model.pt","handler":"my_handler.py"}`, "", "my_handler.py"},
		{"module in the archive", `{"modelName":"m","serializedFile":"model.pt","handler":"model"}`, "", "model"},
		{"module:function", `{"modelName":"m","serializedFile":"model.pt","handler":"handler:handle"}`, "", "handler:handle"},
		{"TorchServe built-in torchd lacks", `{"modelName":"m","serializedFile":"model.pt","handler":"base_handler"}`, "", "base_handler"},
		{"TorchServe built-in by path", `{"modelName":"m","serializedFile":"model.pt","handler":"serve/ts/torch_handler/image_classifier.py:handle"}`, "", "image_classifier"},
		{"eager model", `{"modelName":"m","serializedFile":"model.pt","handler":"image_classifier","modelFile":"model.py"}`, "", "image_classifier"},
		{"eager model, state dict", `{"modelName":"m","serializedFile":"weights.bin","handler":"my_handler.py","modelFile":"model.py"}`, "", "my_handler.py"},
		{"forced by the config", `{"modelName":"m","serializedFile":"model.pt","handler":"image_classifier"}`, `handler = "python"`, "image_classifier"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files := []zipEntry{{name: "model.pt", data: fakeTorchScript}, {name: "weights.bin"}, {name: "model.py"}, {name: ManifestPath, data: manifestJSON(tc.model)}}
			if tc.config != "" {
				files = append(files, zipEntry{name: ConfigTOML, data: tc.config})
			}
			m, err := Open(writeTemp(t, "m.mar", makeZip(t, files...)))
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			if m.Config.Handler != HandlerPython || m.PythonHandler != tc.entry {
				t.Errorf("handler %q, python handler %q; want %q", m.Config.Handler, m.PythonHandler, tc.entry)
			}
		})
	}
	// TorchServe's text_classifier reads a torchtext vocabulary, torchd's a vocab.txt: the archive's
	// files say whose it is.
	for _, tc := range []struct {
		name  string
		model string
		files []string
		want  string
	}{
		{"source_vocab.pt", `{"modelName":"m","serializedFile":"model.pt","handler":"text_classifier"}`, []string{"source_vocab.pt"}, HandlerPython},
		{"manifest's sourceVocab", `{"modelName":"m","serializedFile":"model.pt","handler":"text_classifier","sourceVocab":"vocab.pt"}`, []string{"vocab.pt"}, HandlerPython},
		{"vocab.txt", `{"modelName":"m","serializedFile":"model.pt","handler":"text_classifier"}`, []string{"vocab.txt"}, "text_classifier"},
		{"both", `{"modelName":"m","serializedFile":"model.pt","handler":"text_classifier"}`, []string{"source_vocab.pt", "tokenizer.json"}, "text_classifier"},
	} {
		t.Run("text_classifier with "+tc.name, func(t *testing.T) {
			files := []zipEntry{{name: "model.pt", data: fakeTorchScript}, {name: ManifestPath, data: manifestJSON(tc.model)}}
			for _, f := range tc.files {
				files = append(files, zipEntry{name: f})
			}
			m, err := Open(writeTemp(t, "m.mar", makeZip(t, files...)))
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			if m.Config.Handler != tc.want || tc.want == HandlerPython && m.PythonHandler != "text_classifier" {
				t.Errorf("handler %q, python handler %q; want %q", m.Config.Handler, m.PythonHandler, tc.want)
			}
		})
	}
	// A built-in handler cannot load an eager model: the refusal says what to set.
	mar := makeZip(t, zipEntry{name: "model.pt", data: fakeTorchScript}, zipEntry{name: "model.py"},
		zipEntry{name: ConfigTOML, data: `handler = "image_classifier"`},
		zipEntry{name: ManifestPath, data: manifestJSON(`{"modelName":"m","serializedFile":"model.pt","handler":"my_handler.py","modelFile":"model.py"}`)})
	_, err := Open(writeTemp(t, "m.mar", mar))
	var ce *ConfigError
	if !errors.Is(err, ErrUnsupportedModel) || !errors.As(err, &ce) || ce.Key != "model.modelFile" || !strings.Contains(err.Error(), `handler = "python"`) {
		t.Errorf("eager model under a built-in handler: %v", err)
	}
}

func TestOpenUnknownFormat(t *testing.T) {
	if _, err := Open(writeTemp(t, "model.zip", makeZip(t))); !errors.Is(err, ErrUnknownFormat) {
		t.Errorf("err = %v", err)
	}
	if _, err := Open(filepath.Join(t.TempDir(), "missing.mar")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("err = %v", err)
	}
}

func TestModelPath(t *testing.T) {
	m, err := Open(writeTemp(t, "resnet-18.mar", makeZip(t, tsFiles...)))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for name, want := range map[string]error{
		"../etc/passwd":      ErrPathTraversal,
		"/etc/passwd":        ErrAbsolutePath,
		"missing.txt":        ErrMissingFile,
		"MAR-INF":            ErrMissingFile, // a directory is not a file of the model
		"":                   ErrUnsafePath,
		"./resnet18.pt":      nil,
		"index_to_name.json": nil,
	} {
		p, err := m.Path(name)
		if !errors.Is(err, want) {
			t.Errorf("Path(%q) = %q, %v; want %v", name, p, err, want)
		}
	}
}

func TestHandlerRegistry(t *testing.T) {
	if IsHandlerName("object_detector") {
		t.Fatal("object_detector supported before registration")
	}
	RegisterHandlerName("object_detector")
	defer func() {
		handlerMu.Lock()
		delete(handlerNames, "object_detector")
		handlerMu.Unlock()
	}()
	if !IsHandlerName("object_detector") || checkHandler("object_detector") != nil {
		t.Error("registered handler not accepted")
	}
	want := []string{"image_captioner", "image_classifier", "object_detector", "python", "tensor", "text_classifier"}
	if got := HandlerNames(); !reflect.DeepEqual(got, want) {
		t.Errorf("HandlerNames = %q", got)
	}
}
