/* thread.h — starting hvd's own threads. Header-only. */
#ifndef HVD_THREAD_H
#define HVD_THREAD_H

#include <pthread.h>
#include <signal.h>
#include <stddef.h>

/* Starts fn(arg) on a new thread with every asynchronous signal
 * blocked: those belong to the program's own threads (a Python handler,
 * a profiler's timer, a DataLoader's SIGCHLD), and one landing in hvd's
 * waits would only interrupt them. A fault's signal (SIGSEGV, SIGBUS,
 * SIGFPE, SIGILL, SIGTRAP, SIGSYS) stays open: it is raised on the
 * thread that faulted, and blocked there the kernel would kill the
 * process past the program's handler (faulthandler's traceback, say).
 * Returns 0 or -errno. */
static inline int hvd_thread_start(pthread_t *thread, void *(*fn)(void *), void *arg) {
        static const int faults[] = { SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS };
        sigset_t all, old;
        sigfillset(&all);
        for (size_t i = 0; i < sizeof faults / sizeof faults[0]; i++)
                sigdelset(&all, faults[i]);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        int r = -pthread_create(thread, NULL, fn, arg);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        return r;
}

#endif
