// Package memtrim gives memory the process no longer uses back to the operating system:
// the Go heap's free pages and, under glibc, the C allocator's free memory, which
// keep_freed_memory otherwise keeps for good. It knows nothing of LibTorch.
package memtrim

/*
#ifdef __GLIBC__
#include <malloc.h>
static int trim(void) { return malloc_trim(0); }
#else
static int trim(void) { return 0; }
#endif
*/
import "C"

import "runtime/debug"

// Trim returns free memory to the operating system: it runs a garbage collection, releases
// the Go heap's free pages, and trims every glibc arena. It costs a full collection, so it
// is for idle moments, not the request path.
func Trim() {
	debug.FreeOSMemory()
	C.trim()
}
