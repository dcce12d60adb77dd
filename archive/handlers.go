package archive

import (
	"fmt"
	"path"
	"slices"
	"strings"
	"sync"
)

// The built-in handler names torchd accepts in a manifest or config. The
// handlers package owns the implementations; it may add names with
// RegisterHandlerName from its init, so that archive never imports it.
var (
	handlerMu    sync.RWMutex
	handlerNames = map[string]bool{
		"image_classifier": true,
		"image_captioner":  true,
		"text_classifier":  true,
		"tensor":           true,
		HandlerPython:      true,
	}
)

// RegisterHandlerName adds name to the handlers archives may name. It is safe
// for concurrent use; registering a name twice is harmless.
func RegisterHandlerName(name string) {
	handlerMu.Lock()
	defer handlerMu.Unlock()
	handlerNames[name] = true
}

// IsHandlerName reports whether name is a handler torchd supports.
func IsHandlerName(name string) bool {
	handlerMu.RLock()
	defer handlerMu.RUnlock()
	return handlerNames[name]
}

// HandlerNames returns the supported handler names, sorted.
func HandlerNames() []string {
	handlerMu.RLock()
	defer handlerMu.RUnlock()
	names := make([]string, 0, len(handlerNames))
	for n := range handlerNames {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// HandlerPython is the handler that runs an archive's Python handler in handler processes
// (package handlerproc), with TorchServe's own worker.
const HandlerPython = "python"

// tsBuiltins are TorchServe's built-in handlers; those torchd has no native handler for
// run in handler processes.
var tsBuiltins = []string{"base_handler", "image_classifier", "image_segmenter", "object_detector", "text_classifier", "densenet_handler", "vision_handler", "text_handler"}

// isPythonHandler reports whether name is a handler TorchServe's worker can import: a
// file ("x.py"), MMS's "module:function", a path to one, or a TorchServe built-in.
func isPythonHandler(name string) bool {
	return strings.HasSuffix(name, ".py") || strings.Contains(name, ":") || strings.ContainsAny(name, `/\`) ||
		slices.Contains(tsBuiltins, name)
}

// PythonEntry reports whether only a handler process can run handler name (a handler.py,
// "module:function", TorchServe's own handlers by name or path), and the entry point
// TorchServe's worker imports for it.
func PythonEntry(name string) (string, bool) {
	if pythonOnly(name) == "" {
		return "", false
	}
	return tsEntry(name), true
}

// pythonOnly returns name when only a handler process can run it, else "".
func pythonOnly(name string) string {
	if isPythonHandler(name) && !IsHandlerName(name) {
		return name
	}
	return ""
}

// tsEntry is name as TorchServe's worker imports it. Its built-ins named by path
// (".../ts/torch_handler/image_classifier.py:handle", as TorchServe's own API tests register
// them) are imported by module name: they have no module-level function, only the class.
func tsEntry(name string) string {
	if i := strings.LastIndex(name, "ts/torch_handler/"); i >= 0 {
		mod, _, _ := strings.Cut(name[i+len("ts/torch_handler/"):], ":")
		return strings.TrimSuffix(mod, ".py")
	}
	return name
}

// checkHandler returns nil if name is supported, else an error wrapping
// ErrUnsupportedHandler that says why and lists what torchd supports.
func checkHandler(name string) error {
	if name == "" {
		return fmt.Errorf("%w: no handler given; torchd supports %s", ErrUnsupportedHandler, strings.Join(HandlerNames(), ", "))
	}
	if IsHandlerName(name) {
		return nil
	}
	if isPythonHandler(name) {
		return fmt.Errorf("%w: %q is a custom Python handler: torchd runs it in a handler process when the archive's manifest names it (torch-model-archiver --handler) and this config says handler = %q; its built-in handlers are %s",
			ErrUnsupportedHandler, name, HandlerPython, strings.Join(HandlerNames(), ", "))
	}
	return fmt.Errorf("%w: %q; torchd supports the built-in handlers %s", ErrUnsupportedHandler, name, strings.Join(HandlerNames(), ", "))
}

// torchScriptExts are the serialized-file extensions torchd loads as
// TorchScript. TorchServe's base handler picks the loader by extension too
// (.pt TorchScript, .onnx ONNX Runtime, .so AOT), so anything else is refused
// with a clear error instead of failing later inside LibTorch.
var torchScriptExts = []string{".pt", ".pth", ".ts", ".torchscript"}

// PackageExt is the extension of an AOTInductor package (torch.export, then
// torch._inductor.aoti_compile_and_package), which torchd loads with LibTorch's
// package loader instead of as TorchScript.
const PackageExt = ".pt2"

func isTorchScriptName(name string) bool {
	return slices.Contains(torchScriptExts, strings.ToLower(path.Ext(name)))
}

// IsPackageName reports whether a serialized file is an AOTInductor package.
func IsPackageName(name string) bool { return strings.ToLower(path.Ext(name)) == PackageExt }

// ONNXExt is the extension of an ONNX model, which torchd runs with ONNX Runtime.
const ONNXExt = ".onnx"

// IsONNXName reports whether a serialized file is an ONNX model.
func IsONNXName(name string) bool { return strings.ToLower(path.Ext(name)) == ONNXExt }

// OpenVINOExt is the extension of an OpenVINO IR's graph, whose weights are the .bin of the
// same name beside it; torchd runs it with OpenVINO (backends/openvino).
const OpenVINOExt = ".xml"

// IsOpenVINOName reports whether a serialized file is an OpenVINO IR.
func IsOpenVINOName(name string) bool { return strings.ToLower(path.Ext(name)) == OpenVINOExt }

// IsTorchName reports whether LibTorch loads a serialized file of this name: TorchScript or
// an AOTInductor package.
func IsTorchName(name string) bool { return isTorchScriptName(name) || IsPackageName(name) }

// isModelName reports whether torchd can load a serialized file of this name.
func isModelName(name string) bool { return IsTorchName(name) || IsONNXName(name) }

// checkSerializedName reports an ErrUnsupportedModel error for names that are neither
// TorchScript nor an AOTInductor package.
func checkSerializedName(name string) error {
	// An IR is named, never guessed: an archive's other .xml files are not models.
	if isModelName(name) || IsOpenVINOName(name) {
		return nil
	}
	return fmt.Errorf("%w: %q is not a model file torchd loads: TorchScript (%s) saved with torch.jit.save, an AOTInductor package (%s), an ONNX model (%s) or an OpenVINO IR (%s, its .bin beside it)",
		ErrUnsupportedModel, name, strings.Join(torchScriptExts, ", "), PackageExt, ONNXExt, OpenVINOExt)
}
