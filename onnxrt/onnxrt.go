package onnxrt

// ONNX Runtime's header comes from third_party/onnxruntime/include (make onnxruntime); the
// library itself is opened with dlopen (ort.c), so only libdl is linked.

/*
#cgo CFLAGS: -I${SRCDIR}/../third_party/onnxruntime/include -O2 -Wall
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "ort.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"unsafe"

	"github.com/torchd/torchd/internal/nativelib"
)

// LibraryName is the file name of the ONNX Runtime library the default search looks for.
const LibraryName = "libonnxruntime.so.1.31.1"

// LibraryEnv names the environment variable that gives the library's path.
const LibraryEnv = "TORCHD_ONNXRUNTIME_LIB"

var (
	// ErrNoLibrary is wrapped by Init's and NewSession's errors when the ONNX Runtime library
	// cannot be found or opened.
	ErrNoLibrary = errors.New("ONNX Runtime library not available")
	// ErrBadInput is wrapped by Run's errors about its arguments (names, types, shapes, sizes),
	// whether this package or ONNX Runtime found them, and by NewSession's about Options.
	ErrBadInput = errors.New("bad input")
	// ErrBadModel is wrapped by NewSession's errors about the model file: unreadable,
	// truncated, an invalid graph, external data that is missing or outside its folder.
	ErrBadModel = errors.New("bad model")
	// ErrOutOfMemory is wrapped by Run's errors when ONNX Runtime could not allocate a tensor:
	// past SetMemoryLimit's cap, or the machine's memory.
	ErrOutOfMemory = errors.New("out of memory")
	// ErrClosed is returned by calls on a closed Session.
	ErrClosed = errors.New("onnxrt: session is closed")
)

// Error is an error from ONNX Runtime (or the library loader). Code is ONNX Runtime's
// OrtErrorCode name ("INVALID_ARGUMENT", "INVALID_PROTOBUF", ...), empty for the wrapper's own.
type Error struct {
	Op   string
	Code string
	Msg  string
	kind error
}

func (e *Error) Error() string { return "onnxrt: " + e.Op + ": " + e.Msg }

// Unwrap gives ErrBadInput, ErrBadModel, ErrOutOfMemory or ErrNoLibrary where the error is
// one of those.
func (e *Error) Unwrap() error { return e.kind }

var codeNames = []string{"OK", "FAIL", "INVALID_ARGUMENT", "NO_SUCHFILE", "NO_MODEL", "ENGINE_ERROR",
	"RUNTIME_EXCEPTION", "INVALID_PROTOBUF", "MODEL_LOADED", "NOT_IMPLEMENTED", "INVALID_GRAPH",
	"EP_FAIL", "MODEL_LOAD_CANCELED", "MODEL_REQUIRES_COMPILATION", "NOT_FOUND"}

// sourceLocation matches what ONNX Runtime's exceptions put before their message: a source
// file and line, then the function ("tensorprotoutils.cc:1534 ValidateEmbedded... " or
// "/onnxruntime_src/.../bfc_arena.cc:360 void* onnxruntime::BFCArena::AllocateRawInternal(...) "),
// which means nothing to a user.
var sourceLocation = regexp.MustCompile(`(?:/[\w/.-]*/)?\w+\.(?:cc|h|cpp):\d+ (?:(?:static |virtual )?(?:[\w:<>]+[*&]* )?[\w:~<>]+\([^()]*\)(?: const)? |[A-Za-z_][\w:]* )?`)

// cleanMessage drops source locations and stack traces from an ONNX Runtime message.
func cleanMessage(m string) string {
	if i := strings.Index(m, "\nStacktrace:"); i >= 0 {
		m = m[:i]
	}
	return strings.TrimSpace(sourceLocation.ReplaceAllString(m, ""))
}

// statusError turns an ort_error into a Go error and frees it; kind is the sentinel the
// error wraps when ONNX Runtime's code is INVALID_ARGUMENT (or, for loads, any failure). It
// is the only place where native errors cross into Go.
func statusError(op string, e *C.ort_error, kind error) error {
	if e == nil {
		return nil
	}
	code := int(e.code)
	err := &Error{Op: op, Msg: cleanMessage(C.GoString(e.msg)), kind: kind}
	C.ort_error_free(e)
	if code >= 0 && code < len(codeNames) {
		err.Code = codeNames[code]
	}
	if kind == ErrBadInput && err.Code != "INVALID_ARGUMENT" {
		err.kind = nil // a failure inside the run, not the caller's arguments
		// ONNX Runtime's allocators report no code of their own, only these messages.
		for _, m := range []string{"Available memory of", "Failed to allocate memory", "bad_alloc"} {
			if strings.Contains(err.Msg, m) {
				err.kind = ErrOutOfMemory
			}
		}
	}
	return err
}

var lib = nativelib.Library{Name: "ONNX Runtime", File: LibraryName, Env: LibraryEnv, Make: "make onnxruntime"}

// memLimit is SetMemoryLimit's cap, 0 = none.
var memLimit struct {
	sync.Mutex
	bytes int64
}

// Init opens the ONNX Runtime library and makes the process's ONNX Runtime environment.
// libPath "" searches: TORCHD_ONNXRUNTIME_LIB, then LibraryName beside the running
// executable, then in the source tree's bin/. Once it has succeeded, later calls return nil
// (one library per process; a different libPath then is an error). A failed Init may be
// retried.
func Init(libPath string) error {
	return lib.Open(libPath, func(p string) error {
		cp := C.CString(p)
		e := C.ort_init(cp)
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

// SetMemoryLimit caps, at bytes, what the runs of all the sessions made after it allocate
// together: their intermediate tensors and outputs come from one shared arena (weights are
// outside it), and a run that would go past the cap fails with an error wrapping
// ErrOutOfMemory instead of taking the machine's memory (a graph may allocate any size at run
// time, ConstantOfShape or Expand to a shape it computes). The arena has one lock for all
// those sessions; sessions made before it keep their own. It calls Init("") if needed; once
// per process.
func SetMemoryLimit(bytes int64) error {
	if bytes <= 0 {
		return &Error{Op: "memory limit", kind: ErrBadInput, Msg: "the limit must be more than 0 bytes"}
	}
	if err := Init(""); err != nil {
		return err
	}
	memLimit.Lock()
	defer memLimit.Unlock()
	if memLimit.bytes != 0 {
		return &Error{Op: "memory limit", Msg: fmt.Sprintf("already set, to %d bytes", memLimit.bytes)}
	}
	if err := statusError("memory limit", C.ort_set_memory_limit(C.size_t(bytes)), nil); err != nil {
		return err
	}
	memLimit.bytes = bytes
	return nil
}

// MemoryLimit is SetMemoryLimit's cap, in bytes; 0 while none is set.
func MemoryLimit() int64 { return memoryLimit() }

func memoryLimit() int64 {
	memLimit.Lock()
	defer memLimit.Unlock()
	return memLimit.bytes
}

// LibraryPath is the library Init loaded, or "" before it has.
func LibraryPath() string { return lib.Path() }

// Version is the loaded ONNX Runtime's version ("1.31.1"), or "" before Init has succeeded.
func Version() string {
	if LibraryPath() == "" {
		return ""
	}
	v := C.ort_version()
	if v == nil {
		return ""
	}
	return C.GoString(v)
}
