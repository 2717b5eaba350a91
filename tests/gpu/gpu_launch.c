/* gpu_launch.c — ranks as processes for the GPU tests and benchmark (see
 * gpu_launch.h). The unique id travels parent-made pipes: rank 0 writes
 * one copy per peer. Children are killed by pid when the run times out.
 * Built with GPU_LAUNCH_MOCK (tests/gpu/check_gpu_mock), ranks are threads
 * of one process and the module is linked in, over tests/gpu/mock_cuda.c. */
#include "config.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gpu_launch.h"

double gpu_launch_now(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double) ts.tv_sec + (double) ts.tv_nsec * 1e-9;
}

const char *gpu_launch_module_path(void) {
        static char buf[4096];
        const char *p = getenv("HVD_NCCL_MODULE");
        if (p && *p)
                return p;
        const char *b = getenv("HVD_BUILDDIR");
        snprintf(buf, sizeof buf, "%s%sclient/.libs/libhvd-nccl.so", b ? b : "", b ? "/" : "");
        return buf;
}

#ifdef GPU_LAUNCH_MOCK
extern const hvd_gpu_module_t hvd_gpu_module_v1;
#endif

int gpu_launch_load(const char *path, void **dl, const hvd_gpu_module_t **m, char *err, size_t err_len) {
#ifdef GPU_LAUNCH_MOCK
        (void) path, (void) err, (void) err_len;
        *dl = NULL;
        *m = &hvd_gpu_module_v1;
        return 0;
#endif
        void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (!h) {
                snprintf(err, err_len, "dlopen %s: %s", path, dlerror());
                return -ENOENT;
        }
        const hvd_gpu_module_t *mod = dlsym(h, HVD_GPU_MODULE_SYMBOL);
        if (!mod || mod->abi != HVD_GPU_MODULE_ABI || !mod->probe || !mod->unique_id || !mod->open || !mod->enqueue ||
            !mod->group_start || !mod->group_end || !mod->poll || !mod->abort || !mod->close || !mod->mem_alloc ||
            !mod->mem_free) {
                snprintf(err, err_len, "%s: no usable %s (ABI %u)", path, HVD_GPU_MODULE_SYMBOL, mod ? mod->abi : 0);
                dlclose(h);
                return -EINVAL;
        }
        *dl = h;
        *m = mod;
        return 0;
}

static int read_full(int fd, void *buf, size_t n) {
        for (size_t got = 0; got < n;) {
                ssize_t k = read(fd, (char *) buf + got, n - got);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k <= 0)
                        return -1;
                got += (size_t) k;
        }
        return 0;
}

static int write_full(int fd, const void *buf, size_t n) {
        for (size_t put = 0; put < n;) {
                ssize_t k = write(fd, (const char *) buf + put, n - put);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k <= 0)
                        return -1;
                put += (size_t) k;
        }
        return 0;
}

int gpu_launch_probe(char *msg, size_t msg_len) {
#ifdef GPU_LAUNCH_MOCK
        extern const hvd_gpu_module_t hvd_gpu_module_v1;
        return hvd_gpu_module_v1.probe(msg, msg_len);
#endif
        int p[2];
        if (pipe(p) < 0)
                return -errno;
        pid_t pid = fork();
        if (pid < 0)
                return -errno;
        if (pid == 0) {
                close(p[0]);
                void *dl;
                const hvd_gpu_module_t *m;
                char err[1024] = "";
                int n = gpu_launch_load(gpu_launch_module_path(), &dl, &m, err, sizeof err);
                if (n >= 0)
                        n = m->probe(err, sizeof err);
                if (write_full(p[1], &n, sizeof n) < 0 || write_full(p[1], err, sizeof err) < 0)
                        _exit(1);
                _exit(0);
        }
        close(p[1]);
        int n = -EIO;
        char err[1024] = "probe process failed";
        if (read_full(p[0], &n, sizeof n) < 0 || read_full(p[0], err, sizeof err) < 0)
                n = -EIO;
        close(p[0]);
        waitpid(pid, NULL, 0);
        err[sizeof err - 1] = '\0';
        snprintf(msg, msg_len, "%s", err);
        return n;
}

static int rank_main(int rank, int np, int (*pipes)[2], gpu_rank_fn fn, void *userdata) {
        gpu_rank_t *r = calloc(1, sizeof *r);
        if (!r)
                return 1;
        r->rank = rank;
        r->size = np;
        int rc = gpu_launch_load(gpu_launch_module_path(), &r->dl, &r->m, r->err, sizeof r->err);
        if (rc < 0) {
                fprintf(stderr, "rank %d: %s\n", rank, r->err);
                return 1;
        }
        if (rank == 0) {
                if ((rc = r->m->unique_id(r->id, r->err, sizeof r->err)) < 0 ||
                    (rc = r->m->unique_id(r->id2, r->err, sizeof r->err)) < 0) {
                        fprintf(stderr, "rank 0: unique_id: %s\n", r->err);
                        return 1;
                }
                for (int k = 1; k < np; k++)
                        if (write_full(pipes[k][1], r->id, sizeof r->id) < 0 ||
                            write_full(pipes[k][1], r->id2, sizeof r->id2) < 0)
                                return 1;
        } else if (read_full(pipes[rank][0], r->id, sizeof r->id) < 0 ||
                   read_full(pipes[rank][0], r->id2, sizeof r->id2) < 0) {
                fprintf(stderr, "rank %d: no unique id from rank 0\n", rank);
                return 1;
        }
        rc = fn(r, userdata);
        if (r->g)
                r->m->close(&r->g);
        free(r);
        return rc;
}

#ifdef GPU_LAUNCH_MOCK
typedef struct thread_arg {
        int rank, np, rc;
        int (*pipes)[2];
        gpu_rank_fn fn;
        void *userdata;
} thread_arg_t;

static void *rank_thread(void *p) {
        thread_arg_t *a = p;
        a->rc = rank_main(a->rank, a->np, a->pipes, a->fn, a->userdata);
        return NULL;
}

static int run_threads(int np, int (*pipes)[2], gpu_rank_fn fn, void *userdata, int timeout_sec) {
        pthread_t th[GPU_LAUNCH_MAX_RANKS];
        thread_arg_t args[GPU_LAUNCH_MAX_RANKS];
        for (int k = 0; k < np; k++) {
                args[k] = (thread_arg_t){ .rank = k, .np = np, .pipes = pipes, .fn = fn, .userdata = userdata };
                if (pthread_create(&th[k], NULL, rank_thread, &args[k]) != 0)
                        return 1;
        }
        struct timespec deadline;
        clock_gettime(CLOCK_REALTIME, &deadline);
        deadline.tv_sec += timeout_sec;
        int result = 0;
        for (int k = 0; k < np; k++) {
                if (pthread_timedjoin_np(th[k], NULL, &deadline) != 0) {
                        fprintf(stderr, "run: rank %d still running after %d s\n", k, timeout_sec);
                        return 1; /* the process exits with the threads still in it */
                }
                if (args[k].rc == GPU_LAUNCH_SKIP && result == 0)
                        result = GPU_LAUNCH_SKIP;
                else if (args[k].rc != 0 && args[k].rc != GPU_LAUNCH_SKIP)
                        result = 1;
        }
        for (int k = 0; k < np; k++) {
                close(pipes[k][0]);
                close(pipes[k][1]);
        }
        return result;
}
#endif

int gpu_launch_run(int np, gpu_rank_fn fn, void *userdata, int timeout_sec) {
        int pipes[GPU_LAUNCH_MAX_RANKS][2];
        pid_t pids[GPU_LAUNCH_MAX_RANKS];
        if (np < 1 || np > GPU_LAUNCH_MAX_RANKS)
                return 1;
        fflush(stdout);
        fflush(stderr);
        for (int k = 0; k < np; k++)
                if (pipe(pipes[k]) < 0)
                        return 1;
#ifdef GPU_LAUNCH_MOCK
        (void) pids;
        return run_threads(np, pipes, fn, userdata, timeout_sec);
#endif
        for (int k = 0; k < np; k++) {
                pids[k] = fork();
                if (pids[k] < 0)
                        return 1;
                if (pids[k] == 0) {
                        int rc = rank_main(k, np, pipes, fn, userdata);
                        fflush(stdout);
                        _exit(rc);
                }
        }
        for (int k = 0; k < np; k++) {
                close(pipes[k][0]);
                close(pipes[k][1]);
        }
        int result = 0, left = np;
        double deadline = gpu_launch_now() + timeout_sec;
        while (left > 0) {
                int status;
                pid_t pid = waitpid(-1, &status, WNOHANG);
                if (pid > 0) {
                        int k = 0;
                        while (k < np && pids[k] != pid)
                                k++;
                        if (k == np)
                                continue;
                        pids[k] = 0;
                        left--;
                        int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
                        if (rc == GPU_LAUNCH_SKIP && result == 0)
                                result = GPU_LAUNCH_SKIP;
                        else if (rc != 0 && rc != GPU_LAUNCH_SKIP) {
                                if (rc >= 128)
                                        fprintf(stderr, "rank %d: killed by signal %d\n", k, rc - 128);
                                result = 1;
                        }
                        continue;
                }
                if (gpu_launch_now() > deadline) {
                        fprintf(stderr, "run: ranks still running after %d s: killing them\n", timeout_sec);
                        for (int k = 0; k < np; k++)
                                if (pids[k] > 0) {
                                        kill(pids[k], SIGKILL);
                                        waitpid(pids[k], NULL, 0);
                                        pids[k] = 0;
                                }
                        return 1;
                }
                usleep(10000);
        }
        return result;
}

int gpu_rank_open(gpu_rank_t *r, int size, uint64_t fusion_bytes) {
        if (size > GPU_LAUNCH_MAX_RANKS)
                return -EINVAL;
        for (int k = 0; k < size; k++) {
                r->rank_cross[k] = 0;
                r->rank_local[k] = k;
        }
        r->topo = (hvd_topology_t){ .rank = r->rank,
                                    .size = size,
                                    .local_rank = r->rank,
                                    .local_size = size,
                                    .cross_rank = 0,
                                    .cross_size = 1,
                                    .rank_cross = r->rank_cross,
                                    .rank_local = r->rank_local,
                                    .addrs = NULL,
                                    .listen_fd = -1,
                                    .job_hash = 0 };
        return r->m->open(&r->topo, r->id, r->rank, fusion_bytes, &r->g, r->err, sizeof r->err);
}

int gpu_rank_wait(gpu_rank_t *r, hvd_gpu_op_t *op, double timeout_sec) {
        double deadline = gpu_launch_now() + timeout_sec;
        for (;;) {
                int rc = r->m->poll(r->g, op, r->err, sizeof r->err);
                if (rc < 0)
                        return rc;
                if (rc == 1)
                        return 0;
                if (gpu_launch_now() > deadline) {
                        snprintf(r->err, sizeof r->err, "operation still pending after %.0f s", timeout_sec);
                        return -ETIMEDOUT;
                }
                usleep(20);
        }
}
