/* core_rtt.c — the machine's state beside a benchmark round: the round trip
 * of one cache line between two CPUs (default 0 and 1), two threads pinned
 * there handing a counter back and forth. On a virtual machine the host
 * places the vCPUs, and may move them between rounds: on one 2-vCPU AMD EPYC
 * machine the round trip changed between about 115 ns (one core complex,
 * one L3) and 400 ns (two) from second to second, and every system's busbw
 * at small and mid sizes with it. Prints one line:
 *   bench=core_rtt cpus=A,B rtt_ns=N
 *
 *   core_rtt [CPU_A CPU_B] */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { TRIPS = 20000, TRIES = 3 };

static _Atomic unsigned line __attribute__((aligned(64)));

static double now_sec(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double) ts.tv_sec + (double) ts.tv_nsec * 1e-9;
}

static int pin(int cpu) {
        cpu_set_t s;
        CPU_ZERO(&s);
        CPU_SET(cpu, &s);
        return pthread_setaffinity_np(pthread_self(), sizeof s, &s);
}

static void *answer(void *arg) {
        if (pin(*(const int *) arg) != 0)
                return (void *) 1;
        for (unsigned i = 0; i < TRIPS; i++) {
                while (atomic_load_explicit(&line, memory_order_acquire) != 2 * i + 1)
                        ;
                atomic_store_explicit(&line, 2 * i + 2, memory_order_release);
        }
        return NULL;
}

int main(int argc, char **argv) {
        int a = argc > 2 ? atoi(argv[1]) : 0, b = argc > 2 ? atoi(argv[2]) : 1;
        int r = pin(a);
        if (r != 0) {
                fprintf(stderr, "core_rtt: cannot run on CPU %d: %s\n", a, strerror(r));
                return 1;
        }
        double best = 0;
        for (int t = 0; t < TRIES; t++) {
                atomic_store(&line, 0);
                pthread_t th;
                if ((r = pthread_create(&th, NULL, answer, &b)) != 0) {
                        fprintf(stderr, "core_rtt: %s\n", strerror(r));
                        return 1;
                }
                double t0 = now_sec();
                for (unsigned i = 0; i < TRIPS; i++) {
                        atomic_store_explicit(&line, 2 * i + 1, memory_order_release);
                        while (atomic_load_explicit(&line, memory_order_acquire) != 2 * i + 2) {
                                void *ret;
                                /* the other thread could not be pinned: it has ended */
                                if (i == 0 && now_sec() - t0 > 1.0 && pthread_tryjoin_np(th, &ret) == 0) {
                                        fprintf(stderr, "core_rtt: cannot run on CPU %d\n", b);
                                        return 1;
                                }
                        }
                }
                double d = (now_sec() - t0) / TRIPS;
                pthread_join(th, NULL);
                if (t == 0 || d < best)
                        best = d;
        }
        printf("bench=core_rtt cpus=%d,%d rtt_ns=%.0f\n", a, b, best * 1e9);
        return 0;
}
