/* worker_timeline.c — a known job for tests/test-timeline.sh: named
 * allreduces (three at a time, so they fuse) and a broadcast, with results
 * checked, in one of these flows:
 *   run ROUNDS         ROUNDS rounds of "tl.a", "tl.b", "tl.c" + "tl.bcast"
 *   exit ROUNDS        the same, then exit() without hvd_shutdown
 *   window DIR         "pre.*" rounds until DIR/go exists, then "win.*"
 *                      rounds until DIR/stop exists, then "post.*" rounds;
 *                      rank 0 creates DIR/pre.running and DIR/win.running
 *                      after 3 rounds of each, DIR/pre.done and DIR/win.done
 *                      at their ends, and prints "pre rounds: N"
 *   api FILE           hvd_start_timeline(FILE) around "api.*" rounds only,
 *                      hvd_stop_timeline, then "after.*" rounds
 *   hang DIR           3 rounds, then each rank writes its pid into
 *                      DIR/pid.RANK, rank 0 creates DIR/hanging, and all
 *                      sleep (the test kills them)
 * Exit status 0 when every result was right. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hvd.h"

static int rank, size, failures;

static void check(int ok, const char *what) {
        if (!ok) {
                fprintf(stderr, "rank %d: FAILED %s: %s\n", rank, what, hvd_last_error());
                failures++;
        }
}

/* One round: three allreduces submitted together, then a broadcast. */
static void round_of(const char *prefix, int round) {
        enum { N = 1000 };
        static float a[3][N];
        const char *names[3] = { "a", "b", "c" };
        hvd_handle_t *h[3] = { NULL };
        char name[3][64];
        for (int t = 0; t < 3; t++) {
                for (int i = 0; i < N; i++)
                        a[t][i] = (float) (rank + t + round);
                snprintf(name[t], sizeof name[t], "%s.%s", prefix, names[t]);
                hvd_request_t q = HVD_REQUEST_INIT;
                int64_t shape[1] = { N };
                q.name = name[t];
                q.input = a[t];
                q.output = a[t];
                q.dtype = HVD_FLOAT32;
                q.ndim = 1;
                q.shape = shape;
                q.reduce_op = HVD_REDUCE_SUM;
                check(hvd_allreduce_async(&q, &h[t]) == 0, "allreduce submission");
        }
        for (int t = 0; t < 3; t++) {
                check(h[t] && hvd_handle_wait(h[t]) == 0, "allreduce");
                hvd_handle_release(&h[t]);
                float want = (float) (size * (size - 1) / 2 + size * (t + round));
                check(fabsf(a[t][0] - want) < 1e-3f && fabsf(a[t][N - 1] - want) < 1e-3f, "allreduce result");
        }
        double b[16];
        for (int i = 0; i < 16; i++)
                b[i] = rank == 0 ? round + i : -1;
        char bn[64];
        snprintf(bn, sizeof bn, "%s.bcast", prefix);
        check(hvd_broadcast(bn, b, 16, HVD_FLOAT64, 0) == 0, "broadcast");
        check(b[15] == round + 15, "broadcast result");
}

static int exists(const char *dir, const char *name) {
        char p[4096];
        struct stat st;
        snprintf(p, sizeof p, "%s/%s", dir, name);
        return stat(p, &st) == 0;
}

static void touch(const char *dir, const char *name) {
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", dir, name);
        FILE *f = fopen(p, "w");
        if (f)
                fclose(f);
}

/* Rounds until rank 0 sees DIR/flag; every rank learns it by a broadcast.
 * Rank 0 creates DIR/PREFIX.running after 3 rounds and prints how many it ran. */
static void rounds_until(const char *prefix, const char *dir, const char *flag) {
        for (int round = 0;; round++) {
                round_of(prefix, round);
                if (rank == 0 && round == 2) {
                        char n[64];
                        snprintf(n, sizeof n, "%s.running", prefix);
                        touch(dir, n);
                }
                int32_t go = rank == 0 && round >= 2 && exists(dir, flag);
                char n[64];
                snprintf(n, sizeof n, "%s.flag", prefix);
                check(hvd_broadcast(n, &go, 1, HVD_INT32, 0) == 0, "flag broadcast");
                if (go || failures) {
                        if (rank == 0)
                                printf("%s rounds: %d\n", prefix, round + 1);
                        fflush(stdout);
                        return;
                }
                usleep(20000);
        }
}

int main(int argc, char **argv) {
        if (argc < 3) {
                fprintf(stderr, "usage: %s run|exit ROUNDS | window DIR | api FILE | hang DIR\n", argv[0]);
                return 2;
        }
        if (hvd_init() != 0) {
                fprintf(stderr, "hvd_init: %s\n", hvd_last_error());
                return 1;
        }
        rank = hvd_rank();
        size = hvd_size();
        const char *mode = argv[1], *arg = argv[2];
        if (!strcmp(mode, "run")) {
                for (int r = 0; r < atoi(arg); r++)
                        round_of("tl", r);
        } else if (!strcmp(mode, "window")) {
                rounds_until("pre", arg, "go");
                if (rank == 0)
                        touch(arg, "pre.done");
                rounds_until("win", arg, "stop");
                if (rank == 0)
                        touch(arg, "win.done");
                for (int r = 0; r < 3; r++)
                        round_of("post", r);
        } else if (!strcmp(mode, "api")) {
                check(hvd_start_timeline(NULL, 0) == -EINVAL, "start without a file is refused");
                for (int r = 0; r < 2; r++)
                        round_of("before", r);
                check(hvd_start_timeline(arg, 1) == 0, "hvd_start_timeline");
                for (int r = 0; r < 3; r++)
                        round_of("api", r);
                check(hvd_stop_timeline() == 0, "hvd_stop_timeline");
                for (int r = 0; r < 2; r++)
                        round_of("after", r);
        } else if (!strcmp(mode, "exit")) {
                for (int r = 0; r < atoi(arg); r++)
                        round_of("tl", r);
                exit(failures ? 1 : 0); /* without hvd_shutdown */
        } else if (!strcmp(mode, "hang")) {
                for (int r = 0; r < 3; r++)
                        round_of("tl", r);
                char p[4096];
                snprintf(p, sizeof p, "%s/pid.%d", arg, rank);
                FILE *f = fopen(p, "w");
                if (f) {
                        fprintf(f, "%d\n", (int) getpid());
                        fclose(f);
                }
                if (rank == 0)
                        touch(arg, "hanging");
                for (;;)
                        pause();
        } else {
                fprintf(stderr, "unknown mode %s\n", mode);
                return 2;
        }
        hvd_shutdown();
        return failures ? 1 : 0;
}
