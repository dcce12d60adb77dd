// Package nativelib holds what the bindings of runtimes opened with dlopen (onnxrt/,
// openvino/) share: where their library is looked for, one library per process, the size
// arithmetic of an input that a hostile shape cannot overflow, and a native call cancelled
// when its context ends.
package nativelib

import (
	"context"
	"fmt"
	"math"
	"math/bits"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
)

// Library is one runtime's shared library, opened at most once per process.
type Library struct {
	Name string // the runtime, for messages: "ONNX Runtime"
	File string // the file the default search looks for: "libonnxruntime.so.1.31.1"
	Env  string // the environment variable that gives its path
	Make string // the make target that fetches it: "make onnxruntime"

	mu   sync.Mutex
	path string
}

// Open opens the library once: libPath, else $Env, else File beside the running executable,
// else in the source tree's bin/. open loads the absolute path it is given, or returns the
// binding's own error; fail makes the binding's error for what Open finds itself (notFound:
// no candidate exists). Once it has succeeded, later calls return nil, and a different
// libPath is an error; a failed Open may be retried.
func (l *Library) Open(libPath string, open func(path string) error, fail func(notFound bool, msg string) error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.path != "" {
		if libPath != "" && libPath != l.path {
			return fail(false, fmt.Sprintf("%s is already loaded from %s; cannot load %s too", l.Name, l.path, libPath))
		}
		return nil
	}
	var tried []string
	for _, p := range l.candidates(libPath) {
		if _, err := os.Stat(p); err != nil {
			tried = append(tried, p)
			continue
		}
		// dlopen searches the system's folders for a name without a slash, not the working one.
		if abs, err := filepath.Abs(p); err == nil {
			p = abs
		}
		if err := open(p); err != nil {
			return err
		}
		l.path = p
		return nil
	}
	return fail(true, fmt.Sprintf("%s library not found (looked for %s); run `%s` or set %s to its path",
		l.Name, strings.Join(tried, ", "), l.Make, l.Env))
}

// candidates lists where Open looks, in order.
func (l *Library) candidates(libPath string) []string {
	if libPath != "" {
		return []string{libPath}
	}
	if p := os.Getenv(l.Env); p != "" {
		return []string{p}
	}
	var out []string
	if exe, err := os.Executable(); err == nil {
		if real, err := filepath.EvalSymlinks(exe); err == nil {
			exe = real
		}
		out = append(out, filepath.Join(filepath.Dir(exe), l.File))
	}
	// This file's folder at build time, for go test in a checkout (gone under -trimpath).
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		out = append(out, filepath.Join(filepath.Dir(file), "..", "..", "bin", l.File))
	}
	return out
}

// Path is the library Open loaded, or "" before it has.
func (l *Library) Path() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.path
}

// MaxElements bounds an input's element count, far above any real tensor, so that a hostile
// shape cannot overflow the size arithmetic.
const MaxElements = 1 << 48

// Elements is the product of shape, or an error for a negative or overflowing one.
func Elements(shape []int64) (int64, error) {
	n := int64(1)
	for _, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("dimension %d is negative", d)
		}
		hi, lo := bits.Mul64(uint64(n), uint64(d))
		if hi != 0 || lo > MaxElements {
			return 0, fmt.Errorf("shape %v has too many elements", shape)
		}
		n = int64(lo)
	}
	return n, nil
}

// CheckShape reports what is wrong with shape for the input name that the model declares as
// want (nil: any rank; -1: any size), else gives its element count.
func CheckShape(name string, shape, want []int64) (int64, error) {
	if want != nil && len(shape) != len(want) {
		return 0, fmt.Errorf("input %q has shape %v; the model takes %d dimensions (%v)", name, shape, len(want), want)
	}
	for i, d := range want {
		if d >= 0 && shape[i] != d {
			return 0, fmt.Errorf("input %q has shape %v; the model takes %v (-1: any)", name, shape, want)
		}
	}
	n, err := Elements(shape)
	if err != nil {
		return 0, fmt.Errorf("input %q: %v", name, err)
	}
	return n, nil
}

// CheckBytes reports whether have bytes hold n elements of size bytes each (typ names them).
func CheckBytes(name string, shape []int64, typ string, n int64, size, have int) error {
	if n > math.MaxInt64/int64(size) || int64(have) != n*int64(size) {
		return fmt.Errorf("input %q has shape %v and type %s, %d bytes, but %d given", name, shape, typ, n*int64(size), have)
	}
	return nil
}

// CancelOn calls cancel when ctx ends. The function it returns stops that, waiting for a
// cancel already under way, so cancel never runs after it has returned (the native object
// it touches may then be freed).
func CancelOn(ctx context.Context, cancel func()) (stop func()) {
	var mu sync.Mutex
	done := false
	after := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if !done {
			cancel()
		}
	})
	return func() {
		after()
		mu.Lock()
		defer mu.Unlock()
		done = true
	}
}
