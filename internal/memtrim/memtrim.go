// Package memtrim gives memory the process no longer uses back to the operating system:
// the Go heap's free pages and, under glibc, the C allocator's free memory, which
// keep_freed_memory otherwise keeps for good. It knows nothing of LibTorch.
package memtrim

/*
// __GLIBC__ comes from the C library's own headers: without one included first, the test
// below was always false, and neither function did anything.
#include <stdlib.h>
#ifdef __GLIBC__
#include <malloc.h>
static int glibc(void) { return 1; }
static int trim(void) { return malloc_trim(0); }
#if __GLIBC_PREREQ(2, 33)
static unsigned long long in_use(void) { struct mallinfo2 m = mallinfo2(); return m.uordblks + m.hblkhd; }
#else
static unsigned long long in_use(void) { return 0; }
#endif
#else
static int glibc(void) { return 0; }
static int trim(void) { return 0; }
static unsigned long long in_use(void) { return 0; }
#endif
*/
import "C"

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
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
// system, but not the free tops of threads' heaps, which glibc trims only on a free into
// that heap (torch.TrimArenas does it).
func TrimC() { C.trim() }

// Glibc reports whether the C library is glibc, whose heaps TrimC and FreeHeld know.
func Glibc() bool { return C.glibc() == 1 }

// FreeHeld estimates the bytes of freed C memory the process holds resident: its anonymous
// resident set less what the C allocator has in use and what the Go runtime holds. glibc's
// own count of free bytes (mallinfo2's fordblks) is no measure: it counts every heap's
// untouched top padding too, 64 MiB an arena under keep_freed_memory, so it passed any cap
// while the process held little. 0 where the C library is not glibc 2.33 or newer, or
// /proc is unreadable.
func FreeHeld() uint64 {
	inUse := cInUse()
	if inUse == 0 {
		return 0
	}
	anon, ok := rssAnon()
	if !ok {
		return 0
	}
	s := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	metrics.Read(s)
	held := inUse + s[0].Value.Uint64() - s[1].Value.Uint64()
	if anon <= held {
		return 0
	}
	return anon - held
}

// cInUse returns the bytes glibc has handed out and not had back (0 where unknown).
func cInUse() uint64 { return uint64(C.in_use()) }

// rssAnon reads RssAnon from /proc/self/status.
func rssAnon() (uint64, bool) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, false
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "RssAnon:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10, err == nil
		}
	}
	return 0, false
}
