/* cpubind.h — which CPUs a rank forked on this machine may run on: an
 * equal, contiguous share of the launcher's own CPUs, one share per rank,
 * as Open MPI binds its ranks. Unbound ranks of a job that communicates
 * through shared memory can be stacked on one core by the scheduler (a
 * futex wake puts the woken rank beside its waker) and stay there; each
 * then runs at half speed and every barrier costs a context switch. */
#ifndef HVD_CPUBIND_H
#define HVD_CPUBIND_H

#include <sched.h>
#include <stdbool.h>

typedef enum hvd_cpu_bind {
        HVD_CPU_BIND_SHARE, /* each rank its share of the CPUs (the default) */
        HVD_CPU_BIND_NONE,  /* every rank every CPU, as inherited */
} hvd_cpu_bind_t;

/* Parses "share" or "none". Returns 0, or -EINVAL with the reason in why. */
int hvd_cpu_bind_parse(const char *s, hvd_cpu_bind_t *ret, char *why, size_t why_len);

/* The share of rank `index` of `count` ranks started here, out of the CPUs
 * in avail: CPUs [index·k, (index+1)·k) of avail's CPUs in order, k = the
 * number of CPUs in avail / count. Returns true with *out set, or false
 * (out untouched) when there are fewer CPUs than ranks, or count < 2: then
 * the rank is not bound. */
bool hvd_cpu_share(const cpu_set_t *avail, int index, int count, cpu_set_t *out);

#endif
