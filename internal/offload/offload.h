/*
 * offload.h: a thread of the library's own that runs one blocking call at a time for a Go
 * caller, which meanwhile waits parked on an eventfd (package offload) instead of sitting in
 * a cgo call. A goroutine in a long cgo call keeps its P in _Psyscall; while another P idles,
 * the Go runtime's sysmon polls it every 20 µs to 10 ms (golang/go#18236), and on a small
 * machine each wakeup takes a core from the forward's own threads. Parked, the P is idle and
 * sysmon sleeps. Header-only, C and C++: each cgo package and libtorchd_c compile their own.
 * A cgo package reaches it through a symlink in its own directory (openvino/offload.h), since
 * go build hashes only a package's own files and would not rebuild on a change made here.
 */
#ifndef TORCHD_OFFLOAD_H
#define TORCHD_OFFLOAD_H

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <unistd.h>

typedef struct td_offload {
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  void (*fn)(void *); /* the submitted call, NULL once taken */
  void *arg;
  int efd;
  int busy; /* a call is submitted and has not returned */
  int quit;
} td_offload;

static inline void td_offload_signal(int efd) {
  uint64_t one = 1;
  /* An eventfd write fails only on overflow of its counter, which one write per call never reaches. */
  ssize_t n = write(efd, &one, sizeof one);
  (void)n;
}

static inline void *td_offload_loop(void *p) {
  td_offload *o = (td_offload *)p;
  /* Named, so that top -H and perf tell the forwards from the Go runtime's threads. */
  prctl(PR_SET_NAME, "torchd-forward", 0, 0, 0);
  pthread_mutex_lock(&o->mu);
  for (;;) {
    while (o->fn == NULL && !o->quit) pthread_cond_wait(&o->cv, &o->mu);
    if (o->fn == NULL) break;
    void (*fn)(void *) = o->fn;
    void *arg = o->arg;
    int efd = o->efd;
    o->fn = NULL;
    pthread_mutex_unlock(&o->mu);
    fn(arg);
    pthread_mutex_lock(&o->mu);
    /* Free before the caller wakes, so that its next call finds the thread idle. */
    o->busy = 0;
    td_offload_signal(efd);
  }
  pthread_mutex_unlock(&o->mu);
  return NULL;
}

/* td_offload_new starts a thread; NULL if it cannot (the caller then runs calls itself). */
static inline td_offload *td_offload_new(void) {
  td_offload *o = (td_offload *)calloc(1, sizeof(td_offload));
  if (o == NULL) return NULL;
  pthread_mutex_init(&o->mu, NULL);
  pthread_cond_init(&o->cv, NULL);
  if (pthread_create(&o->thread, NULL, td_offload_loop, o) != 0) {
    pthread_cond_destroy(&o->cv);
    pthread_mutex_destroy(&o->mu);
    free(o);
    return NULL;
  }
  return o;
}

/* td_offload_free waits for a running call, then ends the thread. */
static inline void td_offload_free(void *p) {
  td_offload *o = (td_offload *)p;
  if (o == NULL) return;
  pthread_mutex_lock(&o->mu);
  o->quit = 1;
  pthread_cond_signal(&o->cv);
  pthread_mutex_unlock(&o->mu);
  pthread_join(o->thread, NULL);
  pthread_cond_destroy(&o->cv);
  pthread_mutex_destroy(&o->mu);
  free(o);
}

/*
 * td_offload_submit runs fn(arg) on o's thread and returns at once; the thread writes 1 to
 * efd when fn returns. Where o is NULL or already running a call (a second goroutine on the
 * same thread), fn runs here, before the return, and efd is written all the same: the caller
 * waits the same way either way. Returns 1 if fn ran here.
 */
static inline int td_offload_submit(td_offload *o, void (*fn)(void *), void *arg, int efd) {
  if (o != NULL) {
    pthread_mutex_lock(&o->mu);
    if (!o->busy && !o->quit) {
      o->busy = 1;
      o->fn = fn;
      o->arg = arg;
      o->efd = efd;
      pthread_cond_signal(&o->cv);
      pthread_mutex_unlock(&o->mu);
      return 0;
    }
    pthread_mutex_unlock(&o->mu);
  }
  fn(arg);
  td_offload_signal(efd);
  return 1;
}

#endif
