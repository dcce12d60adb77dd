// memory.cc: LibTorch's threads, and the C allocator's freed memory (kept, then trimmed).

#include "internal.h"

#include <ATen/Parallel.h>

#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <dlfcn.h>

#include <atomic>
#include <climits>
#include <mutex>

namespace td {

namespace {

// What td_trim_arenas frees. glibc's malloc_trim gives back the free pages inside every
// arena and the top of the main one, but never the top of a thread's arena: only a free()
// of 64 KiB or more into that arena trims it (heap_trim), down to M_TOP_PAD and only past
// M_TRIM_THRESHOLD, which td_keep_freed_memory puts out of reach. Those tops are up to a
// heap (64 MiB) each, one per arena, and there are up to 8 arenas a core: registration churn
// held gigabytes that no idle trim reached. So each thread that calls into LibTorch here
// leaves one probe block in its arena per trim round, and td_trim_arenas frees them all with
// the threshold and pad at zero; a probe of an exited thread's arena is freed the same way.
std::mutex probes_mu;
std::vector<void *> probes;
std::atomic<unsigned> probe_round{1};
std::atomic<bool> keeping{false};  // td_keep_freed_memory applied: the tops are kept
thread_local unsigned probed_round = 0;
constexpr size_t kProbeBytes = 64 << 10;  // glibc's FASTBIN_CONSOLIDATION_THRESHOLD

}  // namespace

void note_arena() {
#ifdef __GLIBC__
  if (!keeping.load(std::memory_order_relaxed)) return;
  unsigned r = probe_round.load(std::memory_order_relaxed);
  if (probed_round == r) return;
  probed_round = r;
  void *p = std::malloc(kProbeBytes);
  if (p == nullptr) return;
  std::lock_guard<std::mutex> lock(probes_mu);
  probes.push_back(p);
#endif
}

}  // namespace td

using namespace td;

extern "C" {

void td_set_num_threads(int n) {
  try {
    at::set_num_threads(n);
  } catch (...) {
  }
}

int td_get_num_threads(void) { return at::get_num_threads(); }

// at::set_num_threads is process-wide as well as per thread: besides the calling thread's
// OpenMP nthreads-var and MKL's thread-local count it stores the default for new threads,
// recreates the global pthreadpool (its threads included) and clears oneDNN's convolution
// cache, which every worker shares. So the per-forward setting calls the two per-thread
// setters only. They are looked up in the libraries already loaded (LibTorch's own libgomp,
// and the MKL linked into libtorch_cpu when it has one), so no second runtime is brought in.
// MKL_Set_Num_Threads_Local is the C entry point; the lower-case name takes a pointer.
namespace {
using set_threads_fn = void (*)(int);
using set_threads_local_fn = int (*)(int);
struct local_setters {
  set_threads_fn omp = nullptr;
  set_threads_local_fn mkl = nullptr;
  local_setters() {
    omp = reinterpret_cast<set_threads_fn>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
    mkl = reinterpret_cast<set_threads_local_fn>(dlsym(RTLD_DEFAULT, "MKL_Set_Num_Threads_Local"));
  }
};
}  // namespace

int td_set_num_threads_here(int n) {
  note_arena();
  static const local_setters set;
  if (n < 1) return 0;
  owns_count = true;
  try {
    // A thread's first parallel work applies LibTorch's process default to it (lazily, once);
    // done now, it cannot later overwrite the count set here.
    at::get_num_threads();
    if (set.omp == nullptr) {
      at::set_num_threads(n);
      return at::get_num_threads();
    }
    set.omp(n);
    if (set.mkl != nullptr) set.mkl(n);
    return at::get_num_threads();
  } catch (...) {
    return 0;
  }
}

// glibc serves a block over its mmap threshold (128 KiB, rising to the largest block freed,
// at most 32 MiB) with its own mmap and unmaps it on free; it trims a heap whose free top
// passes the trim threshold; and a thread arena's heap (64 MiB at most) that becomes empty is
// unmapped unless the heap before it has less than the top pad free. A CNN's activations
// are such blocks, so every forward faulted them in and zeroed them afresh, by an amount
// that depended on the worker thread's arena. With mmap off, the trim threshold out of reach
// and a top pad of a whole heap, the arenas keep what they grew to (a block bigger than a
// heap is still mmap'd) and the faults stop after the first forwards; without the pad a
// worker still made and unmapped a heap per forward. Figures: docs/design/binding.md.
int td_keep_freed_memory(void) {
#ifdef __GLIBC__
  bool ok = mallopt(M_MMAP_MAX, 0) == 1 && mallopt(M_TRIM_THRESHOLD, INT_MAX) == 1 &&
            mallopt(M_TOP_PAD, 64 << 20) == 1;
  keeping.store(ok);
  return ok;
#else
  return 0;
#endif
}

// The probes are freed with the trim threshold and pad at zero, so that each free trims its
// arena's top whole; then the settings that keep freed memory come back. Other threads'
// frees in that moment trim their arenas too, which costs them page faults, nothing else.
int td_trim_arenas(void) {
#ifdef __GLIBC__
  if (!keeping.load()) return 0;
  static std::mutex trims;  // one round at a time: another's restore would cut this one short
  std::lock_guard<std::mutex> one(trims);
  std::vector<void *> ps;
  {
    std::lock_guard<std::mutex> lock(probes_mu);
    ps.swap(probes);
    probe_round.fetch_add(1);
  }
  mallopt(M_TRIM_THRESHOLD, 0);
  mallopt(M_TOP_PAD, 0);
  for (void *p : ps) std::free(p);
  mallopt(M_TRIM_THRESHOLD, INT_MAX);
  mallopt(M_TOP_PAD, 64 << 20);
  return static_cast<int>(ps.size());
#else
  return 0;
#endif
}

td_error td_set_num_interop_threads(int n) {
  return guard([&] { at::set_num_interop_threads(n); });
}

}  // extern "C"
