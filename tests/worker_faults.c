/* worker_faults.c — a worker for the fault tests (tests/test-faults.sh,
 * test-heartbeat.sh, test-deadlines.sh). Rank 1 is the victim; the others
 * report what they see. Files in DIR are the only channel with the test:
 *
 *   worker_faults PHASE DIR
 *
 * PHASE join: ranks 0 and 1 join; rank 2 joins only once DIR/go exists.
 *       negotiate: every rank joins; ranks 0 and 2 submit an allreduce that
 *       rank 1 never submits. collective: rank 1's input is unreadable
 *       (PROT_NONE), so it stops inside the data plane while the others wait
 *       there for it. ok: a few checked allreduces (a bystander job).
 *       (with DIR/keepon: until DIR/stop exists). stop: every rank runs
 *       allreduces; rank 1 is stopped by the test.
 * Each rank writes DIR/pid.R, then DIR/ready.R when it is where the fault
 * should find it. Rank 1 then waits for DIR/fault: "exit0" and "exit1" make
 * it exit with that status; for signals the test sends them itself. A
 * surviving rank writes DIR/err.R: "MS CODE MESSAGE" (MS: wall clock at
 * the error, in ms) and exits 3; "OK" lines go to stdout. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "hvd.h"

#define N_ELEMS (1 << 16)

static const char *dir;
static int my_rank = -1;
static float *trap_buf; /* rank 1, collective: PROT_NONE */
static size_t trap_bytes;

static long long wall_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return (long long) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* async-signal-safe: open + close */
static void touch(const char *name) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, name);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd >= 0)
                close(fd);
}

static void write_file(const char *name, const char *text) {
        char path[4096], tmp[4200];
        snprintf(path, sizeof path, "%s/%s", dir, name);
        snprintf(tmp, sizeof tmp, "%s.tmp", path);
        FILE *f = fopen(tmp, "w");
        if (!f)
                return;
        fputs(text, f);
        fclose(f);
        rename(tmp, path);
}

static bool exists(const char *name) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, name);
        return access(path, F_OK) == 0;
}

/* The victim's end: waits for DIR/fault and does what it says (signals
 * come from the test). Async-signal-safe: it may run in a SIGSEGV handler. */
static void victim_wait(void) {
        char path[4096];
        snprintf(path, sizeof path, "%s/fault", dir);
        for (;;) {
                int fd = open(path, O_RDONLY | O_CLOEXEC);
                if (fd >= 0) {
                        char buf[16] = "";
                        ssize_t n = read(fd, buf, sizeof buf - 1);
                        close(fd);
                        if (n >= 5 && memcmp(buf, "exit0", 5) == 0)
                                _exit(0);
                        if (n >= 5 && memcmp(buf, "exit1", 5) == 0)
                                _exit(1);
                }
                struct timespec ts = { 0, 10 * 1000 * 1000 };
                nanosleep(&ts, NULL);
        }
}

static void on_segv(int sig, siginfo_t *si, void *uc) {
        (void) uc;
        char *a = si->si_addr;
        if (trap_buf && a >= (char *) trap_buf && a < (char *) trap_buf + trap_bytes) {
                /* the data plane touched the input: this rank is inside the collective */
                touch("ready.1");
                victim_wait();
        }
        signal(sig, SIG_DFL);
        raise(sig);
}

static int survivor_error(const char *what, int r, const char *msg) {
        char line[2048];
        snprintf(line, sizeof line, "%lld %d %s: %s\n", wall_ms(), r, what, msg ? msg : hvd_strerror(r));
        char name[32];
        snprintf(name, sizeof name, "err.%d", my_rank);
        write_file(name, line);
        printf("rank %d: %s: %s (%s)\n", my_rank, what, hvd_strerror(r), msg ? msg : "");
        fflush(stdout);
        return 3;
}

static void *init_thread(void *arg) {
        (void) arg;
        hvd_init(); /* the victim at join: it dies in here */
        return NULL;
}

static int allreduce_checked(const char *name, float *buf, int size) {
        for (int i = 0; i < N_ELEMS; i++)
                buf[i] = (float) (my_rank + 1) * (float) (i % 7);
        int r = hvd_allreduce(name, buf, buf, N_ELEMS, HVD_FLOAT32, HVD_REDUCE_SUM);
        if (r < 0)
                return r;
        float k = (float) size * (float) (size + 1) / 2;
        for (int i = 0; i < N_ELEMS; i++)
                if (buf[i] != k * (float) (i % 7)) {
                        fprintf(stderr, "rank %d: %s: element %d is %g, expected %g\n", my_rank, name, i,
                                (double) buf[i], (double) (k * (float) (i % 7)));
                        return -EIO;
                }
        return 0;
}

int main(int argc, char **argv) {
        if (argc != 3) {
                fprintf(stderr, "usage: %s join|negotiate|collective|ok|stop DIR\n", argv[0]);
                return 2;
        }
        const char *phase = argv[1];
        dir = argv[2];
        const char *er = getenv("HVD_RANK");
        my_rank = er ? atoi(er) : -1;
        char name[64], text[64];
        snprintf(name, sizeof name, "pid.%d", my_rank);
        snprintf(text, sizeof text, "%d\n", (int) getpid());
        write_file(name, text);
        snprintf(name, sizeof name, "ready.%d", my_rank);

        if (strcmp(phase, "join") == 0) {
                if (my_rank == 1) {
                        pthread_t t;
                        pthread_create(&t, NULL, init_thread, NULL);
                        touch(name);
                        victim_wait();
                }
                if (my_rank == 2) {
                        for (int i = 0; i < 6000 && !exists("go"); i++)
                                usleep(10000);
                } else
                        touch(name);
                int r = hvd_init();
                if (r < 0)
                        return survivor_error("init", r, hvd_last_error());
                printf("rank %d: init succeeded in a job that lost a rank\n", my_rank);
                hvd_shutdown();
                return 1;
        }

        int r = hvd_init();
        if (r < 0)
                return survivor_error("init", r, hvd_last_error());
        int size = hvd_size();
        static float buf[N_ELEMS]; /* static: the phases below end in many places */

        if (strcmp(phase, "ok") == 0) {
                /* at least 20, then on until DIR/stop (when the test made
                 * one): rank 0 decides, the others follow its word */
                bool keepon = exists("keepon");
                for (int i = 0;; i++) {
                        float more = i < 20 || (keepon && !exists("stop"));
                        r = hvd_broadcast("ok.more", &more, 1, HVD_FLOAT32, 0);
                        if (r < 0 || !more) {
                                if (r >= 0)
                                        break;
                                fprintf(stderr, "rank %d: ok: %s: %s\n", my_rank, hvd_strerror(r), hvd_last_error());
                                return 1;
                        }
                        char t[32];
                        snprintf(t, sizeof t, "ok.%d", i % 4);
                        r = allreduce_checked(t, buf, size);
                        if (r < 0) {
                                fprintf(stderr, "rank %d: ok: %s: %s\n", my_rank, hvd_strerror(r), hvd_last_error());
                                return 1;
                        }
                }
                hvd_shutdown();
                printf("rank %d: OK\n", my_rank);
                return 0;
        }
        if (strcmp(phase, "negotiate") == 0) {
                touch(name);
                if (my_rank == 1)
                        victim_wait();
                r = hvd_allreduce("never.scheduled", buf, buf, N_ELEMS, HVD_FLOAT32, HVD_REDUCE_SUM);
                if (r < 0)
                        return survivor_error("allreduce", r, hvd_last_error());
                printf("rank %d: an allreduce without rank 1 succeeded\n", my_rank);
                return 1;
        }
        if (strcmp(phase, "collective") == 0) {
                /* one allreduce first: the data plane is up, the name known */
                r = allreduce_checked("warmup", buf, size);
                if (r < 0)
                        return survivor_error("warmup", r, hvd_last_error());
                float *in = buf;
                if (my_rank == 1) {
                        trap_bytes = (N_ELEMS * sizeof(float) + 4095) & ~(size_t) 4095;
                        trap_buf = mmap(NULL, trap_bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
                        if (trap_buf == MAP_FAILED)
                                return 1;
                        struct sigaction sa = { .sa_sigaction = on_segv, .sa_flags = SA_SIGINFO };
                        sigemptyset(&sa.sa_mask);
                        sigaction(SIGSEGV, &sa, NULL);
                        in = trap_buf;
                } else
                        touch(name);
                r = hvd_allreduce("trapped", in, in, N_ELEMS, HVD_FLOAT32, HVD_REDUCE_SUM);
                if (r < 0) {
                        int st = survivor_error("allreduce", r, hvd_last_error());
                        usleep(300000); /* a moment for the other survivor, on the same deadline */
                        return st;
                }
                printf("rank %d: an allreduce with a rank stuck in it succeeded\n", my_rank);
                return 1;
        }
        if (strcmp(phase, "stop") == 0) {
                /* allreduces until the job fails (rank 1 is stopped by the test) */
                touch(name);
                for (int i = 0;; i++) {
                        char t[32];
                        snprintf(t, sizeof t, "step.%d", i % 8);
                        r = allreduce_checked(t, buf, size);
                        if (r < 0)
                                break;
                        if (i == 50) {
                                snprintf(name, sizeof name, "running.%d", my_rank);
                                touch(name);
                        }
                }
                int r2 = survivor_error("allreduce", r, hvd_last_error());
                if (my_rank == 1)
                        sleep(1); /* resumed after a stop: still here while its late messages arrive */
                /* a call after the abort fails at once too */
                r = hvd_allreduce("after", buf, buf, N_ELEMS, HVD_FLOAT32, HVD_REDUCE_SUM);
                printf("rank %d: next call: %s\n", my_rank, hvd_strerror(r));
                fflush(stdout);
                hvd_shutdown();
                return r2;
        }
        fprintf(stderr, "unknown phase '%s'\n", phase);
        return 2;
}
