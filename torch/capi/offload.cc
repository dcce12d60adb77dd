// offload.cc: forwards on a worker's forward thread (td_module_start, td_package_start).
// A thread that sets its own count is a worker's thread: its OpenMP pool and count move to
// a forward thread of its own, made at its first such call and ended with it.
#include <ATen/Parallel.h>

#include <new>

#include "../../internal/offload/offload.h"
#include "internal.h"
#include "torchd.h"

namespace td {
thread_local bool owns_count = false;  // set by td_set_num_threads_here (memory.cc)
}

namespace {
pthread_key_t forward_key;
pthread_once_t forward_once = PTHREAD_ONCE_INIT;
void forward_key_init() { pthread_key_create(&forward_key, td_offload_free); }

// forward_thread returns the calling thread's forward thread, or NULL where it has none: a
// thread that does not own its count, or one that could not start.
td_offload *forward_thread() {
  if (!td::owns_count) return nullptr;
  pthread_once(&forward_once, forward_key_init);
  auto *o = static_cast<td_offload *>(pthread_getspecific(forward_key));
  if (o == nullptr) {
    o = td_offload_new();
    if (o != nullptr) pthread_setspecific(forward_key, o);
  }
  return o;
}
}  // namespace

struct td_call {
  td_module *m = nullptr;
  td_package *p = nullptr;
  const char *method = nullptr;
  const td_node *nodes = nullptr;
  int n_nodes = 0;
  pthread_t caller{};
  int threads = 0;  // the caller's count, set on the thread that runs the call
  int ran_with = 0;  // the count a forward thread ran the call with; 0 if the caller ran it
  td_error err = nullptr;
  td_result *res = nullptr;
};

namespace {
void run_call(void *arg) {
  auto *c = static_cast<td_call *>(arg);
  if (c->threads > 0 && at::get_num_threads() != c->threads) td_set_num_threads_here(c->threads);
  if (!pthread_equal(pthread_self(), c->caller)) c->ran_with = at::get_num_threads();
  c->err = c->m != nullptr ? td_module_run(c->m, c->method, c->nodes, c->n_nodes, &c->res)
                           : td_package_run(c->p, c->nodes, c->n_nodes, &c->res);
}

td_call *start(td_call *c, int efd) {
  if (c == nullptr) return nullptr;
  c->caller = pthread_self();
  c->threads = at::get_num_threads();
  td_offload_submit(forward_thread(), run_call, c, efd);
  return c;
}
}  // namespace

extern "C" {

td_call *td_module_start(td_module *m, const char *method, const td_node *nodes, int n_nodes, int efd) {
  auto *c = new (std::nothrow) td_call();
  if (c != nullptr) {
    c->m = m;
    c->method = method;
    c->nodes = nodes;
    c->n_nodes = n_nodes;
  }
  return start(c, efd);
}

td_call *td_package_start(td_package *p, const td_node *nodes, int n_nodes, int efd) {
  auto *c = new (std::nothrow) td_call();
  if (c != nullptr) {
    c->p = p;
    c->nodes = nodes;
    c->n_nodes = n_nodes;
  }
  return start(c, efd);
}

td_error td_call_finish(td_call *c, td_result **out, int *ran_with) {
  td_error e = c->err;
  *out = c->res;
  *ran_with = c->ran_with;
  delete c;
  return e;
}
}
