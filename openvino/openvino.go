package openvino

// OpenVINO's C headers come from third_party/openvino/include (make openvino); the library
// itself is opened with dlopen (ov.c), so only libdl is linked.

/*
#cgo CFLAGS: -I${SRCDIR}/../third_party/openvino/include -O2 -Wall
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "ov.h"
*/
import "C"

import (
	"errors"
	"regexp"
	"strings"
	"unsafe"

	"github.com/torchd/torchd/internal/nativelib"
)

// LibraryName is the file name of OpenVINO's C library the default search looks for.
const LibraryName = "libopenvino_c.so.2641"

// LibraryEnv names the environment variable that gives the library's path.
const LibraryEnv = "TORCHD_OPENVINO_LIB"

var (
	// ErrNoLibrary is wrapped by Init's and Compile's errors when OpenVINO's library cannot
	// be found or opened.
	ErrNoLibrary = errors.New("OpenVINO library not available")
	// ErrBadInput is wrapped by Infer's errors about its arguments (count, types, shapes,
	// sizes), whether this package or OpenVINO found them, and by Compile's about Options.
	ErrBadInput = errors.New("bad input")
	// ErrBadModel is wrapped by Compile's errors about the model: files missing, unreadable
	// or truncated, an invalid graph, weights past the .bin's end, tensors too large.
	ErrBadModel = errors.New("bad model")
	// ErrClosed is returned by calls on a closed Model or Request.
	ErrClosed = errors.New("openvino: closed")
)

// Error is an error from OpenVINO (or the library loader). Code is OpenVINO's ov_status_e
// name ("GENERAL_ERROR", "INFER_CANCELLED", ...), empty for the wrapper's own.
type Error struct {
	Op   string
	Code string
	Msg  string
	kind error
}

func (e *Error) Error() string { return "openvino: " + e.Op + ": " + e.Msg }

// Unwrap gives ErrBadInput, ErrBadModel or ErrNoLibrary where the error is one of those.
func (e *Error) Unwrap() error { return e.kind }

var codeNames = map[int]string{-1: "GENERAL_ERROR", -2: "NOT_IMPLEMENTED", -3: "NETWORK_NOT_LOADED",
	-4: "PARAMETER_MISMATCH", -5: "NOT_FOUND", -6: "OUT_OF_BOUNDS", -7: "UNEXPECTED", -8: "REQUEST_BUSY",
	-9: "RESULT_NOT_READY", -10: "NOT_ALLOCATED", -11: "INFER_NOT_STARTED", -12: "NETWORK_NOT_READ",
	-13: "INFER_CANCELLED", -14: "INVALID_C_PARAM", -15: "UNKNOWN_C_ERROR", -16: "NOT_IMPLEMENT_C_METHOD",
	-17: "UNKNOW_EXCEPTION"}

// noise matches what OpenVINO's exceptions carry besides their message: "Exception from
// src/inference/src/cpp/core.cpp:112:" lines, "Check 'x' failed at src/...:" prefixes and
// source paths, which mean nothing to a user.
var noise = regexp.MustCompile(`(?m)^Exception from [\w/.+-]+:\d+:\s*$|^Check '[^\n]*' failed at [\w/.+-]+:\d+:\s*|(?:[\w.+-]+/)*[\w+-]+\.(?:cpp|hpp|cc|h):\d+:?\s*`)

// cleanMessage drops source locations from an OpenVINO message and joins its lines.
func cleanMessage(m string) string {
	m = noise.ReplaceAllString(m, "")
	var parts []string
	for _, l := range strings.Split(m, "\n") {
		if l = strings.TrimSpace(l); l != "" && l != "[ GENERAL_ERROR ]" {
			parts = append(parts, l)
		}
	}
	return strings.Join(parts, "; ")
}

// statusError turns an ovw_error into a Go error and frees it; kind is the sentinel it wraps.
// It is the only place where native errors cross into Go.
func statusError(op string, e *C.ovw_error, kind error) error {
	if e == nil {
		return nil
	}
	err := &Error{Op: op, Code: codeNames[int(e.code)], Msg: cleanMessage(C.GoString(e.msg)), kind: kind}
	C.ovw_error_free(e)
	return err
}

var lib = nativelib.Library{Name: "OpenVINO", File: LibraryName, Env: LibraryEnv, Make: "make openvino"}

// Init opens OpenVINO's C library and makes the process's OpenVINO core. libPath ""
// searches: TORCHD_OPENVINO_LIB, then LibraryName beside the running executable, then in the
// source tree's bin/. Once it has succeeded, later calls return nil (one library per process;
// a different libPath then is an error). A failed Init may be retried.
func Init(libPath string) error {
	return lib.Open(libPath, func(p string) error {
		cp := C.CString(p)
		e := C.ovw_init(cp)
		C.free(unsafe.Pointer(cp))
		if err := statusError("init", e, ErrNoLibrary); err != nil {
			err.(*Error).Msg = "cannot load " + p + ": " + err.(*Error).Msg
			return err
		}
		return nil
	}, func(notFound bool, msg string) error {
		err := &Error{Op: "init", Msg: msg}
		if notFound {
			err.kind = ErrNoLibrary
		}
		return err
	})
}

// LibraryPath is the library Init loaded, or "" before it has.
func LibraryPath() string { return lib.Path() }

// Version is the loaded OpenVINO's build number ("2026.4.1-..."), or "" before Init has
// succeeded.
func Version() string {
	if LibraryPath() == "" {
		return ""
	}
	v := C.ovw_version()
	if v == nil {
		return ""
	}
	defer C.free(unsafe.Pointer(v))
	return C.GoString(v)
}
