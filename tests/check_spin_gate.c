/* check_spin_gate.c — the data plane's spin gate (client/cpu_backend.c,
 * hvd_topology_t.spin_gate): a rank that reaches a shared-memory barrier
 * first spins for its peers (up to 1 ms on one node) only while its gate
 * is open, i.e. while an application thread of its process waits for an
 * operation; with the gate closed (the application computes while the
 * operation runs) it gives its core away at once. Two forked ranks on
 * one segment, pinned to different CPUs: rank 1 reaches the barrier
 * 1.5 ms after rank 0, and rank 0's thread CPU time in the barrier is
 * what it spun. CPU time, not wall time: a descheduled spin costs none,
 * so a loaded machine can only make the spin look shorter, and the open
 * gate's case (the control that the measure sees a spin) takes the
 * largest of three tries, the closed gate's the smallest. */
#include "config.h"

#include <check.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "hvd.pb-c.h"

#define LATE_USEC 1500 /* rank 1's delay: less than one futex sleep of the barrier (2 ms) */
#define TRIES     3

static uint64_t thread_cpu_usec(void) {
        struct timespec ts;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
        return (uint64_t) ts.tv_sec * 1000000 + (uint64_t) ts.tv_nsec / 1000;
}

static void pin(int me) {
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET((int) (me % (ncpu > 0 ? ncpu : 1)), &set);
        sched_setaffinity(0, sizeof set, &set);
}

/* One rank: TRIES barriers after a warm-up one; rank 0 writes the CPU
 * time of each into cpu_usec (shared memory). Returns an exit status. */
static int rank_main(const char *shm, int me, uint32_t gate_value, uint64_t *cpu_usec) {
        int rank_cross[2] = { 0, 0 }, rank_local[2] = { 0, 1 };
        _Atomic uint32_t gate = gate_value;
        hvd_topology_t topo = {
                .rank = me,
                .size = 2,
                .local_rank = me,
                .local_size = 2,
                .cross_rank = 0,
                .cross_size = 1,
                .rank_cross = rank_cross,
                .rank_local = rank_local,
                .listen_fd = -1,
                .spin_gate = &gate,
        };
        pin(me);
        char err[256];
        hvd_backend_t *b = NULL;
        if (hvd_cpu_backend_new(shm, &topo, 1 << 16, 10 * UINT64_C(1000000), NULL, NULL, &b, err, sizeof err) < 0) {
                fprintf(stderr, "rank %d: %s\n", me, err);
                return 2;
        }
        hvd_xop_t bar = { .kind = HVD__KIND__KIND_BARRIER, .name = "barrier" };
        int r = hvd_backend_execute(b, &bar, err, sizeof err);
        for (int t = 0; t < TRIES && r == 0; t++) {
                if (me == 1) {
                        usleep(LATE_USEC);
                        r = hvd_backend_execute(b, &bar, err, sizeof err);
                } else {
                        uint64_t c0 = thread_cpu_usec();
                        r = hvd_backend_execute(b, &bar, err, sizeof err);
                        cpu_usec[t] = thread_cpu_usec() - c0;
                }
                if (r == 0)
                        r = hvd_backend_execute(b, &bar, err, sizeof err); /* both start the next try together */
        }
        if (r < 0)
                fprintf(stderr, "rank %d: %s\n", me, err);
        hvd_backend_destroy(&b);
        return r < 0 ? 3 : 0;
}

/* Rank 0's CPU time in each of the TRIES late barriers, with its gate and
 * rank 1's at gate_value. */
static void late_barriers(uint32_t gate_value, uint64_t cpu_usec[TRIES]) {
        char shm[64];
        snprintf(shm, sizeof shm, "/hvd-check-spin-gate-%d-%u", (int) getpid(), gate_value);
        uint64_t *shared = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        ck_assert_ptr_ne(shared, MAP_FAILED);
        pid_t pids[2];
        for (int i = 0; i < 2; i++) {
                pids[i] = fork();
                ck_assert_int_ge(pids[i], 0);
                if (pids[i] == 0)
                        _exit(rank_main(shm, i, gate_value, shared));
        }
        for (int i = 0; i < 2; i++) {
                int st = 0;
                ck_assert_int_eq(waitpid(pids[i], &st, 0), pids[i]);
                ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "rank %d failed (status %d)", i, st);
        }
        memcpy(cpu_usec, shared, TRIES * sizeof *cpu_usec);
        munmap(shared, 4096);
        printf("gate %s: rank 0's CPU time in each late barrier:", gate_value ? "open" : "closed");
        for (int t = 0; t < TRIES; t++)
                printf(" %llu us", (unsigned long long) cpu_usec[t]);
        printf("\n");
}

START_TEST(test_closed_gate_does_not_spin) {
        uint64_t cpu[TRIES], least = UINT64_MAX;
        late_barriers(0, cpu);
        for (int t = 0; t < TRIES; t++)
                least = cpu[t] < least ? cpu[t] : least;
        /* a 3 us grace, a few yields, then a futex sleep until rank 1 comes */
        ck_assert_msg(least < 300, "rank 0 used %llu us of CPU waiting %d us with the gate closed",
                      (unsigned long long) least, LATE_USEC);
}
END_TEST

START_TEST(test_open_gate_spins) {
        if (sysconf(_SC_NPROCESSORS_ONLN) < 2) { /* both ranks on one CPU: nobody spins (cpu_shared) */
                printf("gate open: not measured, one CPU\n");
                return;
        }
        uint64_t cpu[TRIES], most = 0;
        late_barriers(1, cpu);
        for (int t = 0; t < TRIES; t++)
                most = cpu[t] > most ? cpu[t] : most;
        /* up to 1 ms (SPIN_USEC) of the 1.5 ms rank 0 waits */
        ck_assert_msg(most > 500, "rank 0 used only %llu us of CPU waiting %d us with the gate open",
                      (unsigned long long) most, LATE_USEC);
}
END_TEST

int main(void) {
        Suite *s = suite_create("spin_gate");
        TCase *tc = tcase_create("barrier");
        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, test_closed_gate_does_not_spin);
        tcase_add_test(tc, test_open_gate_spins);
        suite_add_tcase(s, tc);
        SRunner *sr = srunner_create(s);
        srunner_set_fork_status(sr, CK_NOFORK);
        srunner_run_all(sr, CK_NORMAL);
        int failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
