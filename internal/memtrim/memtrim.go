// Package memtrim gives memory the process no longer uses back to the operating system:
// the Go heap's free pages and, under glibc, the C allocator's free memory, which
// keep_freed_memory otherwise keeps for good. It knows nothing of LibTorch.
package memtrim

/*
#ifdef __GLIBC__
#include <malloc.h>
static int trim(void) { return malloc_trim(0); }
#if __GLIBC_PREREQ(2, 33)
static unsigned long long free_held(void) { return mallinfo2().fordblks; }
#else
static unsigned long long free_held(void) { return 0; }
#endif
#else
static int trim(void) { return 0; }
static unsigned long long free_held(void) { return 0; }
#endif
*/
import "C"

import (
	"runtime"
	"runtime/debug"
)

// Trim returns free memory to the operating system: it runs garbage collections, releases
// the Go heap's free pages, and trims every glibc arena. It costs two full collections, so
// it is for idle moments, not the request path. The first collection empties the sync.Pools
// (the image buffers among them) into their victim caches, and the second frees those.
func Trim() {
	runtime.GC()
	debug.FreeOSMemory()
	TrimC()
}

// TrimC trims every glibc arena: the free pages inside the heaps go back to the operating
// system (the tops of threads' heaps are kept; glibc trims only the main heap's).
func TrimC() { C.trim() }

// FreeHeld returns the bytes the C allocator holds free in its heaps (glibc 2.33 or newer;
// 0 elsewhere).
func FreeHeld() uint64 { return uint64(C.free_held()) }
