// Package triton reads Triton Inference Server model repositories of PyTorch models:
// <repo>/<model>/config.pbtxt and <repo>/<model>/<version>/model.pt (platform
// pytorch_libtorch, backend pytorch) or model.pt2 (platform torch_aoti). It parses
// config.pbtxt with the protobuf text parser into Triton's ModelConfig and maps it onto an
// archive.Model, so that the daemon loads a repository model on the same path as an
// archive. Like archive, it knows files and configurations, not tensors or LibTorch.
//
// What torchd cannot serve is refused per model with a reason (see Read): other platforms
// and backends, ensembles, sequence batching, priority levels, malformed configs, and files
// reached through links that leave the repository.
package triton

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	"github.com/torchd/torchd/archive"
	"github.com/torchd/torchd/proto/inference"
)

// ConfigFile is a model's configuration, at the root of its directory.
const ConfigFile = "config.pbtxt"

// Platforms and backends torchd serves, and their default model file names.
const (
	PlatformLibTorch = "pytorch_libtorch" // TorchScript, model.pt
	PlatformAOTI     = "torch_aoti"       // AOTInductor package, model.pt2
	BackendPyTorch   = "pytorch"
	PlatformONNX     = "onnxruntime_onnx" // ONNX, model.onnx, run by ONNX Runtime
	PlatformEnsemble = "ensemble"         // a pipeline of the repository's models, run by core
	// RuntimeEnsemble is the runtime an ensemble's archive.ModelConfig names.
	RuntimeEnsemble = "ensemble"
	BackendONNX     = "onnxruntime"
	// RuntimeONNX is the runtime an ONNX model's archive.ModelConfig names.
	RuntimeONNX = "onnxruntime"
	// BackendPython runs a model.py's TritonPythonModel; RuntimePython is the runtime its
	// archive.ModelConfig names (not "python": that is TorchServe handlers' runtime).
	BackendPython = "python"
	RuntimePython = "python_backend"
)

// IsONNX reports whether a config is served by ONNX Runtime: platform onnxruntime_onnx or
// backend onnxruntime.
func IsONNX(c *inference.ModelConfig) bool {
	return c.Platform == PlatformONNX && (c.Backend == "" || c.Backend == BackendONNX) ||
		c.Platform == "" && c.Backend == BackendONNX
}

// maxConfig bounds config.pbtxt; real ones are a few kilobytes.
const maxConfig = 4 << 20

// ErrUnsupported marks a model torchd refuses to serve; the message says why.
var ErrUnsupported = errors.New("not supported by torchd")

// Model is one model directory of a repository as read.
type Model struct {
	Name string
	// Config is the parsed configuration, with its override applied and the name filled
	// in; nil when it could not be read.
	Config *inference.ModelConfig
	// Versions are the versions the version policy selects, oldest first.
	Versions []Version
	// Warnings are settings torchd accepts but does not honour exactly.
	Warnings []string
	// Err says why the model cannot be served; nil if it can (its versions may still fail).
	Err error
	// Stamp changes when config.pbtxt or a version directory's files change (poll mode
	// compares it); it is set whether or not the model can be served.
	Stamp string

	dir string // the model directory, symlinks resolved
}

// Version is one version directory of a model.
type Version struct {
	Version string // the directory name, e.g. "1"
	Path    string // the model file, symlinks resolved; "" when Err is set
	Err     error  // why this version cannot be served
	Stamp   string // changes when the model file or the config changes
}

// Dir returns the model's directory, symlinks resolved; "" if it could not be read.
func (m *Model) Dir() string { return m.dir }

// List returns the names of the repository's model directories, sorted. Hidden entries
// and plain files are skipped, as Triton does.
func List(repo string) ([]string, error) {
	entries, err := os.ReadDir(repo)
	if err != nil {
		return nil, fmt.Errorf("model repository: %w", err)
	}
	var out []string
	for _, e := range entries {
		n := e.Name()
		if strings.HasPrefix(n, ".") {
			continue
		}
		fi, err := os.Stat(filepath.Join(repo, n)) // follows a link; Read checks where it leads
		if err != nil || !fi.IsDir() {
			continue
		}
		out = append(out, n)
	}
	return out, nil
}

// Read reads the model directory repo/name. override, when not nil, is a ModelConfig in
// JSON (Triton's load with a "config" parameter) used in place of config.pbtxt. Read never
// fails as a whole: what is wrong is in Model.Err or in a Version's Err.
func Read(repo, name string, override []byte) *Model {
	m := &Model{Name: name}
	m.Err = m.read(repo, override)
	m.Stamp = fsStamp(filepath.Join(repo, name))
	if override != nil {
		m.Stamp += " override"
	}
	return m
}

func (m *Model) read(repo string, override []byte) error {
	root, err := filepath.EvalSymlinks(repo)
	if err != nil {
		return fmt.Errorf("model repository: %w", err)
	}
	if strings.ContainsAny(m.Name, `/\`) || m.Name == "" || m.Name == "." || m.Name == ".." {
		return fmt.Errorf("invalid model name %q", m.Name)
	}
	dir, err := inside(root, filepath.Join(root, m.Name))
	if err != nil {
		return err
	}
	m.dir = dir
	cfg := &inference.ModelConfig{}
	if override != nil {
		if err := protojson.Unmarshal(override, cfg); err != nil {
			return fmt.Errorf("config override: %v", err)
		}
	} else {
		p, err := inside(root, filepath.Join(dir, ConfigFile))
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				// Triton can complete a missing config for some backends, never for PyTorch.
				return fmt.Errorf("no %s: the PyTorch backend needs one (Triton does not complete PyTorch configs)", ConfigFile)
			}
			return err
		}
		data, err := readSmall(p)
		if err != nil {
			return err
		}
		if err := prototext.Unmarshal(data, cfg); err != nil {
			return fmt.Errorf("%s: %v", ConfigFile, err)
		}
	}
	if cfg.Name == "" {
		cfg.Name = m.Name
	}
	m.Config = cfg
	if cfg.Name != m.Name {
		return fmt.Errorf("%s: name %q differs from the model directory's %q, which Triton requires them to match", ConfigFile, cfg.Name, m.Name)
	}
	file, err := m.check()
	if err != nil {
		return err
	}
	return m.readVersions(root, file)
}

// inside resolves p's symlinks and checks that it stays below root, so that a repository
// cannot serve files from elsewhere on the machine through a link.
func inside(root, p string) (string, error) {
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", err
	}
	rel, err := filepath.Rel(root, real)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "", fmt.Errorf("%s is a link to %s, outside the model repository: refused", p, real)
	}
	return real, nil
}

func readSmall(p string) ([]byte, error) {
	fi, err := os.Stat(p)
	if err != nil {
		return nil, err
	}
	if fi.Size() > maxConfig {
		return nil, fmt.Errorf("%s is larger than %d bytes", p, maxConfig)
	}
	return os.ReadFile(p)
}

// check refuses what torchd cannot serve and returns the model file's name.
func (m *Model) check() (string, error) {
	c := m.Config
	file := c.DefaultModelFilename
	switch {
	case c.Platform == PlatformEnsemble || c.GetEnsembleScheduling() != nil:
		if err := checkEnsemble(c); err != nil {
			return "", err
		}
		// An ensemble has no model file: its version directories are empty.
	case c.Backend == BackendPython:
		if file == "" {
			file = "model.py"
		}
		if err := checkPython(c); err != nil {
			return "", err
		}
	case c.Platform == PlatformAOTI && (c.Backend == "" || c.Backend == BackendPyTorch):
		if file == "" {
			file = "model.pt2"
		}
	case c.Platform == PlatformLibTorch && (c.Backend == "" || c.Backend == BackendPyTorch),
		c.Platform == "" && c.Backend == BackendPyTorch:
		if file == "" {
			file = "model.pt"
		}
	case IsONNX(c):
		if file == "" {
			file = "model.onnx"
		}
		if err := checkAccelerators(c); err != nil {
			return "", err
		}
	case IsOpenVINO(c):
		if file == "" {
			file = "model.xml"
		}
		if err := checkOpenVINO(c); err != nil {
			return "", err
		}
	case c.Platform == "" && c.Backend == "":
		return "", fmt.Errorf("%s names neither platform nor backend; torchd serves platform %q (model.pt), %q (model.pt2) and %q (model.onnx)", ConfigFile, PlatformLibTorch, PlatformAOTI, PlatformONNX)
	case c.Platform == "tensorrt_plan" || c.Backend == "tensorrt":
		return "", fmt.Errorf("%w: platform %q: a TensorRT engine is built for one GPU and TensorRT version; serve the ONNX model it was built from (platform %q) or the PyTorch model (docs/guide/triton.md)", ErrUnsupported, c.Platform, PlatformONNX)
	default:
		return "", fmt.Errorf("%w: platform %q backend %q; torchd serves platform %q (TorchScript), %q (AOTInductor), %q (ONNX Runtime) and backend %q",
			ErrUnsupported, c.Platform, c.Backend, PlatformLibTorch, PlatformAOTI, PlatformONNX, BackendOpenVINO)
	}
	if file != "" && (strings.ContainsAny(file, `/\`) || file == "." || file == "..") {
		return "", fmt.Errorf("default_model_filename %q must be a file name", file)
	}
	if len(c.CcModelFilenames) > 0 {
		m.Warnings = append(m.Warnings, "cc_model_filenames is ignored: torchd loads default_model_filename")
	}
	if c.GetSequenceBatching() != nil {
		return "", fmt.Errorf("%w: sequence_batching (stateful models) is not supported; torchd batches independent requests (dynamic_batching)", ErrUnsupported)
	}
	if c.MaxBatchSize < 0 {
		return "", fmt.Errorf("max_batch_size must be ≥ 0, got %d", c.MaxBatchSize)
	}
	if len(c.BatchInput) > 0 || len(c.BatchOutput) > 0 {
		return "", fmt.Errorf("%w: batch_input and batch_output (ragged batching)", ErrUnsupported)
	}
	if c.GetModelTransactionPolicy().GetDecoupled() {
		return "", fmt.Errorf("%w: a decoupled model (several responses per request)", ErrUnsupported)
	}
	// Strings are for the runtimes that take them (ONNX Runtime, Python, ensembles of them).
	if c.Platform == PlatformLibTorch || c.Platform == PlatformAOTI || c.Backend == BackendPyTorch {
		for _, in := range c.Input {
			if in.DataType == inference.DataType_TYPE_STRING {
				return "", fmt.Errorf("%w: input %q: TYPE_STRING has no LibTorch tensor type; tokenize in a Python model or an ONNX graph before it (an ensemble)", ErrUnsupported, in.Name)
			}
		}
		for _, out := range c.Output {
			if out.DataType == inference.DataType_TYPE_STRING {
				return "", fmt.Errorf("%w: output %q: TYPE_STRING has no LibTorch tensor type", ErrUnsupported, out.Name)
			}
		}
	}
	// ONNX Runtime's and OpenVINO's backends complete a config without inputs and outputs
	// from the graph (Triton's auto-complete); the PyTorch backend cannot.
	if len(c.Input) == 0 && !IsONNX(c) && !IsOpenVINO(c) {
		return "", errors.New("the config declares no input; the PyTorch backend needs every input declared")
	}
	if len(c.Output) == 0 && !IsONNX(c) && !IsOpenVINO(c) {
		return "", errors.New("the config declares no output; the PyTorch backend needs every output declared")
	}
	_, warn, err := m.settings()
	if err != nil {
		return "", err
	}
	m.Warnings = append(m.Warnings, warn...)
	return file, nil
}

// checkEnsemble refuses an ensemble whose scheduling is empty or malformed, whose tensors
// are not produced before they are used (a cycle, or an input no step or ensemble input
// gives), or that names itself. Whether its models exist and their tensors match is checked
// when it loads, once they are loaded.
func checkEnsemble(c *inference.ModelConfig) error {
	es := c.GetEnsembleScheduling()
	if c.Platform != PlatformEnsemble || es == nil {
		return errors.New(`an ensemble needs both platform: "ensemble" and ensemble_scheduling`)
	}
	if len(es.Step) == 0 {
		return errors.New("ensemble_scheduling has no step")
	}
	have := map[string]bool{}
	for _, in := range c.Input {
		have[in.Name] = true
	}
	done := make([]bool, len(es.Step))
	for progress := true; progress; {
		progress = false
		for i, st := range es.Step {
			if done[i] {
				continue
			}
			ready := true
			for _, t := range st.InputMap {
				ready = ready && have[t]
			}
			if !ready {
				continue
			}
			done[i], progress = true, true
			for _, t := range st.OutputMap {
				have[t] = true
			}
		}
	}
	for i, st := range es.Step {
		switch {
		case st.ModelName == "":
			return fmt.Errorf("ensemble step %d names no model", i+1)
		case st.ModelName == c.Name:
			return fmt.Errorf("ensemble step %d runs the ensemble itself (a cycle)", i+1)
		case len(st.InputMap) == 0 || len(st.OutputMap) == 0:
			return fmt.Errorf("ensemble step %d (%s) needs an input_map and an output_map", i+1, st.ModelName)
		case !done[i]:
			var missing []string
			for _, t := range st.InputMap {
				if !have[t] {
					missing = append(missing, t)
				}
			}
			slices.Sort(missing)
			return fmt.Errorf("ensemble step %d (%s) takes %s, which no ensemble input or earlier step gives (a cycle, or a name that does not match)", i+1, st.ModelName, strings.Join(missing, ", "))
		}
	}
	for _, out := range c.Output {
		if !have[out.Name] {
			return fmt.Errorf("ensemble output %q is not the output of any step", out.Name)
		}
	}
	if len(c.Input) == 0 || len(c.Output) == 0 {
		return errors.New("an ensemble declares its inputs and outputs")
	}
	return nil
}

// checkAccelerators refuses the execution accelerators torchd's ONNX Runtime cannot run: its
// library is ONNX Runtime's CPU build (TensorRT, CUDA and OpenVINO are other builds).
func checkAccelerators(c *inference.ModelConfig) error {
	ea := c.GetOptimization().GetExecutionAccelerators()
	for _, a := range ea.GetGpuExecutionAccelerator() {
		return fmt.Errorf("%w: gpu_execution_accelerator %q: torchd runs ONNX Runtime's CPU build; remove the accelerator (the model then runs on the CPU) or serve the PyTorch model on a GPU", ErrUnsupported, a.Name)
	}
	for _, a := range ea.GetCpuExecutionAccelerator() {
		return fmt.Errorf("%w: cpu_execution_accelerator %q: torchd runs ONNX Runtime's default CPU execution provider; remove the accelerator", ErrUnsupported, a.Name)
	}
	for _, g := range c.InstanceGroup {
		if g.Kind == inference.ModelInstanceGroup_KIND_GPU {
			return fmt.Errorf("%w: instance_group kind KIND_GPU for an ONNX model: torchd runs ONNX Runtime's CPU build; use KIND_CPU", ErrUnsupported)
		}
	}
	return nil
}

// readVersions lists the numeric version directories and applies the version policy.
func (m *Model) readVersions(root, file string) error {
	entries, err := os.ReadDir(m.dir)
	if err != nil {
		return err
	}
	var all []int64
	for _, e := range entries {
		n := e.Name()
		// Triton ignores names that are not numbers, or that start with 0 (but "0").
		v, err := strconv.ParseInt(n, 10, 64)
		if err != nil || v < 0 || strconv.FormatInt(v, 10) != n {
			continue
		}
		if fi, err := os.Stat(filepath.Join(m.dir, n)); err == nil && !fi.IsDir() {
			continue
		}
		all = append(all, v)
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(m.Config)
	sum := sha256.Sum256(b)
	config := hex.EncodeToString(sum[:8])
	var chosen []int64
	vp := m.Config.GetVersionPolicy()
	switch {
	case vp.GetAll() != nil:
		chosen = all
	case vp.GetSpecific() != nil:
		for _, v := range vp.GetSpecific().Versions {
			chosen = append(chosen, v)
		}
		sort.Slice(chosen, func(i, j int) bool { return chosen[i] < chosen[j] })
	default:
		n := 1
		if l := vp.GetLatest(); l != nil && l.NumVersions > 0 {
			n = int(l.NumVersions)
		}
		chosen = all[max(len(all)-n, 0):]
	}
	if len(chosen) == 0 {
		return fmt.Errorf("no version directory (a number, such as 1/) holds the model")
	}
	for _, v := range chosen {
		ver := Version{Version: strconv.FormatInt(v, 10)}
		if file == "" {
			// An ensemble's version is its directory: it holds no file.
			p, err := inside(root, filepath.Join(m.dir, ver.Version))
			if err != nil {
				ver.Err = fmt.Errorf("version %s: %v", ver.Version, err)
			} else {
				ver.Path, ver.Stamp = p, config
			}
			m.Versions = append(m.Versions, ver)
			continue
		}
		p, err := inside(root, filepath.Join(m.dir, ver.Version, file))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			ver.Err = fmt.Errorf("version %s has no %s", ver.Version, file)
		case err != nil:
			ver.Err = fmt.Errorf("version %s: %v", ver.Version, err)
		default:
			if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() {
				ver.Err = fmt.Errorf("version %s: %s is not a file", ver.Version, file)
			} else {
				ver.Path = p
				ver.Stamp = config + " " + fileStamp(p, fi)
			}
		}
		m.Versions = append(m.Versions, ver)
	}
	return nil
}

// fsStamp fingerprints a model directory: its entries and those of its subdirectories (the
// versions), by name, size, modification time and inode, so that a file replaced by a
// rename or a copy is seen.
func fsStamp(dir string) string {
	h := sha256.New()
	var walk func(d string, depth int)
	walk = func(d string, depth int) {
		entries, err := os.ReadDir(d)
		if err != nil {
			fmt.Fprintf(h, "%s: %v\n", d, err)
			return
		}
		for _, e := range entries {
			p := filepath.Join(d, e.Name())
			fi, err := os.Stat(p)
			if err != nil {
				fmt.Fprintf(h, "%s: %v\n", p, err)
				continue
			}
			fmt.Fprintf(h, "%s\n", fileStamp(p, fi))
			if fi.IsDir() && depth < 2 {
				walk(p, depth+1)
			}
		}
	}
	walk(dir, 0)
	return hex.EncodeToString(h.Sum(nil))
}

func fileStamp(p string, fi fs.FileInfo) string {
	var ino uint64
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		ino = st.Ino
	}
	return fmt.Sprintf("%s %d %d %d %v", p, fi.Size(), fi.ModTime().UnixNano(), ino, fi.IsDir())
}

// Archive returns the archive.Model of version v, served with the tensor handler. It is
// used in place and never removed; Close is a no-op.
func (m *Model) Archive(v Version) (*archive.Model, error) {
	if m.Err != nil {
		return nil, m.Err
	}
	if v.Err != nil {
		return nil, v.Err
	}
	s, err := m.Settings()
	if err != nil {
		return nil, err
	}
	if s.Runtime == RuntimeEnsemble {
		return &archive.Model{Source: v.Path, Kind: archive.KindTriton, Dir: v.Path, Name: m.Name, Version: v.Version, Config: s}, nil
	}
	fi, err := os.Stat(v.Path)
	if err != nil {
		return nil, err
	}
	am := &archive.Model{
		Source: filepath.Dir(v.Path), Kind: archive.KindTriton, Dir: filepath.Dir(v.Path),
		Name: m.Name, Version: v.Version, Config: s,
		SerializedFile: filepath.Base(v.Path),
		Files:          []archive.File{{Name: filepath.Base(v.Path), Size: fi.Size()}},
	}
	// A package's signature: torchd's metadata, or what a plain package's code checks (its
	// batch range and precision come from there).
	if archive.IsPackageName(v.Path) {
		if am.Package, err = archive.ReadPackageSignature(v.Path); err != nil {
			return nil, err
		}
		// model_int8.pt2 beside model.pt2: served by the precision setting, as in an archive.
		if err := am.LoadVariants(); err != nil {
			return nil, err
		}
	}
	return am, nil
}
