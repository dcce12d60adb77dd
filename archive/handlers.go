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

// checkHandler returns nil if name is supported, else an error wrapping
// ErrUnsupportedHandler that says why and lists what torchd supports.
func checkHandler(name string) error {
	if name == "" {
		return fmt.Errorf("%w: no handler given; torchd supports %s", ErrUnsupportedHandler, strings.Join(HandlerNames(), ", "))
	}
	if IsHandlerName(name) {
		return nil
	}
	// torch-model-archiver stores a custom handler as "file.py", "module" (with
	// module.py in the archive) or "module:function" (MMS); none can run here.
	if strings.HasSuffix(name, ".py") || strings.Contains(name, ":") || strings.ContainsAny(name, `/\`) {
		return fmt.Errorf("%w: %q is a custom Python handler; torchd runs no Python and supports only the built-in handlers %s",
			ErrUnsupportedHandler, name, strings.Join(HandlerNames(), ", "))
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

// isModelName reports whether torchd can load a serialized file of this name.
func isModelName(name string) bool { return isTorchScriptName(name) || IsPackageName(name) }

// checkSerializedName reports an ErrUnsupportedModel error for names that are neither
// TorchScript nor an AOTInductor package.
func checkSerializedName(name string) error {
	if isModelName(name) {
		return nil
	}
	return fmt.Errorf("%w: %q is not a TorchScript file; torchd loads only TorchScript (%s) saved with torch.jit.save, or an AOTInductor package (%s)",
		ErrUnsupportedModel, name, strings.Join(torchScriptExts, ", "), PackageExt)
}
