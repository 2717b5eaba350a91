/* worker_cycle.c — N short-lived workers, one after another: each is a
 * forked child that joins its own one-rank job (HVD_JOB_ID=PREFIX-i),
 * does one allreduce and leaves (hvd_shutdown, exit). For the daemon's
 * resource test: connections, jobs and their shared memory come and go.
 *   worker_cycle N PREFIX       (HVD_RUNTIME_DIR and HVD_JOB_SECRET set)
 * Exits 0 when every child succeeded. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hvd.h"

static int child(const char *prefix, int i) {
        char id[128];
        snprintf(id, sizeof id, "%s-%d", prefix, i);
        setenv("HVD_JOB_ID", id, 1);
        setenv("HVD_RANK", "0", 1);
        setenv("HVD_SIZE", "1", 1);
        setenv("HVD_LOCAL_RANK", "0", 1);
        setenv("HVD_LOCAL_SIZE", "1", 1);
        int r = hvd_init();
        if (r < 0) {
                fprintf(stderr, "cycle %d: hvd_init: %s\n", i, hvd_strerror(r));
                return 1;
        }
        float x[4] = { 1, 2, 3, 4 };
        r = hvd_allreduce("x", x, x, 4, HVD_FLOAT32, HVD_REDUCE_SUM);
        if (r < 0 || x[3] != 4) {
                fprintf(stderr, "cycle %d: allreduce: %s\n", i, hvd_strerror(r));
                return 1;
        }
        r = hvd_shutdown();
        if (r < 0) {
                fprintf(stderr, "cycle %d: hvd_shutdown: %s\n", i, hvd_strerror(r));
                return 1;
        }
        return 0;
}

int main(int argc, char **argv) {
        if (argc != 3) {
                fprintf(stderr, "usage: worker_cycle N PREFIX\n");
                return 2;
        }
        int n = atoi(argv[1]);
        for (int i = 0; i < n; i++) {
                fflush(NULL);
                pid_t pid = fork();
                if (pid < 0) {
                        perror("fork");
                        return 1;
                }
                if (pid == 0)
                        _exit(child(argv[2], i));
                int st;
                if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                        fprintf(stderr, "worker_cycle: cycle %d failed\n", i);
                        return 1;
                }
        }
        printf("worker_cycle: %d cycles ok\n", n);
        return 0;
}
