/* thread.h — starting hvd's own threads. Header-only. */
#ifndef HVD_THREAD_H
#define HVD_THREAD_H

#include <pthread.h>
#include <signal.h>

/* Starts fn(arg) on a new thread with every signal blocked: signals
 * belong to the program's own threads (a Python handler, a profiler's
 * timer, a DataLoader's SIGCHLD), and one landing in hvd's waits would
 * only interrupt them. Returns 0 or -errno. */
static inline int hvd_thread_start(pthread_t *thread, void *(*fn)(void *), void *arg) {
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        int r = -pthread_create(thread, NULL, fn, arg);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        return r;
}

#endif
