/* dispatch.c — fuzzes the daemon's message handlers: a real hvd_daemon_t
 * (daemon/, sockets bound in a private runtime directory but
 * never connected) is fed a sequence of frames through hvd_daemon_feed(),
 * as if they came from eight worker connections, two hvdctl connections,
 * four other daemons on the peer socket and two root daemons, with worker
 * exits and clock jumps in between. Each frame is decoded and validated as
 * off the wire, then handled by the same code the reactor runs.
 * Input: 1 byte of settings (bit 0: a peer socket; bit 1: tight limits;
 * bit 2: relay_fanout 2, so that a root of 4 hosts or more uses relays),
 * then frames of [op][2 bytes little-endian length][payload]; op bits 0-2
 * the source (0 worker, 1 control, 2 peer, 3 root, 4 a worker exits,
 * 5 time passes: payload = seconds), bits 3-5 which connection, bit 6 the
 * sender is another uid, bit 7 its uid is unknown.
 * Invariants: no crash, leak or UB; the job table within max_jobs, at most
 * one worker per connection, peers only for the jobs that named them (a
 * root in a hello, a relay in its root's welcome);
 * after destroy, every descriptor closed and every shared-memory segment
 * of the daemon unlinked. */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coordinator.h"
#include "fuzz.h"
#include "log.h"

static char runtime_dir[64];

static void remove_runtime_dir(void) {
        char path[128];
        snprintf(path, sizeof path, "%s/peer.endpoint", runtime_dir);
        unlink(path);
        rmdir(runtime_dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
        (void) argc;
        (void) argv;
        hvd_log_max_level = getenv("HVD_FUZZ_LOG") ? LOG_DEBUG : -1;
        snprintf(runtime_dir, sizeof runtime_dir, "/tmp/hvd-fuzz-dispatch.XXXXXX");
        if (!mkdtemp(runtime_dir)) {
                perror("mkdtemp");
                abort();
        }
        atexit(remove_runtime_dir);
        return 0;
}

static size_t count_dir(const char *path, const char *prefix) {
        DIR *dir = opendir(path);
        size_t n = 0;
        if (!dir)
                return 0;
        struct dirent *e;
        while ((e = readdir(dir)))
                if (e->d_name[0] != '.' && strncmp(e->d_name, prefix, strlen(prefix)) == 0)
                        n++;
        closedir(dir);
        return n;
}

/* What is open, to tell which descriptor stayed behind. */
static void dump_fds(void) {
        DIR *dir = opendir("/proc/self/fd");
        struct dirent *e;
        while (dir && (e = readdir(dir))) {
                char path[300], target[256];
                snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
                ssize_t n = readlink(path, target, sizeof target - 1);
                if (n > 0) {
                        target[n] = 0;
                        fprintf(stderr, "fd %s -> %s\n", e->d_name, target);
                }
        }
        if (dir)
                closedir(dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        if (size < 1)
                return 0;
        if (!runtime_dir[0])
                LLVMFuzzerInitialize(NULL, NULL);
        char shm_prefix[32];
        snprintf(shm_prefix, sizeof shm_prefix, "hvd-%d-", (int) getpid());
        size_t fds_before = count_dir("/proc/self/fd", "");
        size_t shm_before = count_dir("/dev/shm", shm_prefix);

        hvd_daemon_config_t cfg;
        hvd_daemon_config_init(&cfg);
        snprintf(cfg.runtime_dir, sizeof cfg.runtime_dir, "%s", runtime_dir);
        if (data[0] & 1)
                snprintf(cfg.peer_listen, sizeof cfg.peer_listen, "tcp://127.0.0.1:*");
        if (data[0] & 4)
                cfg.relay_fanout = 2;
        if (data[0] & 2) {
                cfg.max_jobs = 2;
                cfg.max_ranks_per_job = 4;
                cfg.max_tensors_per_job = 4;
        } else {
                cfg.max_jobs = 4;
                cfg.max_ranks_per_job = 64;
                cfg.max_tensors_per_job = 64;
        }
        hvd_daemon_t *d = NULL;
        int r = hvd_daemon_new(&cfg, &d);
        FUZZ_ASSERT(r == 0, "hvd_daemon_new: %d", r);

        uid_t me = getuid();
        size_t hellos = 0, off = 1;
        while (off + 3 <= size) {
                uint8_t op = data[off];
                size_t len = (size_t) data[off + 1] | (size_t) data[off + 2] << 8;
                off += 3;
                if (len > size - off)
                        len = size - off;
                const uint8_t *body = data + off;
                off += len;
                unsigned conn = (op >> 3) & 7;
                uid_t uid = (op & 0x80) ? (uid_t) -1 : (op & 0x40) ? me + 1 : me;
                char id[64];
                int n;
                switch (op & 7) {
                case 0: /* a worker connection */
                        n = snprintf(id, sizeof id, "worker-%u", conn);
                        /* a hello may create a job and a peer for its root */
                        hellos++;
                        r = hvd_daemon_feed(d, HVD_DAEMON_FROM_WORKER, id, (size_t) n, uid, body, len);
                        FUZZ_ASSERT(r == 0, "feed(worker): %d", r);
                        break;
                case 1: /* hvdctl */
                        n = snprintf(id, sizeof id, "hvdctl-%u", conn & 1);
                        r = hvd_daemon_feed(d, HVD_DAEMON_FROM_CONTROL, id, (size_t) n, uid, body, len);
                        FUZZ_ASSERT(r == 0, "feed(control): %d", r);
                        break;
                case 2: /* another daemon on the peer socket */
                        n = snprintf(id, sizeof id, "node-%u", conn & 3);
                        r = hvd_daemon_feed(d, HVD_DAEMON_FROM_PEER, id, (size_t) n, (uid_t) -1, body, len);
                        FUZZ_ASSERT(r == 0 || (r == -ENOENT && !cfg.peer_listen[0]), "feed(peer): %d", r);
                        break;
                case 3: /* a root daemon this one reports to (named by a hello's root_peer) */
                        n = snprintf(id, sizeof id, "tcp://127.0.0.1:%u", 7100 + (conn & 1));
                        r = hvd_daemon_feed(d, HVD_DAEMON_FROM_ROOT, id, (size_t) n, (uid_t) -1, body, len);
                        FUZZ_ASSERT(r == 0 || r == -ENOENT, "feed(root): %d", r);
                        break;
                case 4: /* a worker process exits */
                        n = snprintf(id, sizeof id, "worker-%u", conn);
                        r = hvd_daemon_feed_exit(d, id, (size_t) n);
                        FUZZ_ASSERT(r == 0 || r == -ENOENT, "feed_exit: %d", r);
                        break;
                case 5: /* time passes */ hvd_daemon_feed_time(d, (uint64_t) (len ? body[0] : 1) * 1000000); break;
                default: break;
                }
                size_t jobs, workers, peers;
                hvd_daemon_sizes(d, &jobs, &workers, &peers);
                FUZZ_ASSERT(jobs <= cfg.max_jobs, "%zu jobs, max_jobs %u", jobs, cfg.max_jobs);
                FUZZ_ASSERT(workers <= 8, "%zu workers from 8 connections", workers);
                /* a root per hello, and a relay per job (named by its root's welcome) */
                FUZZ_ASSERT(peers <= 2 * hellos, "%zu peers after %zu hellos", peers, hellos);
        }
        hvd_daemon_destroy(&d);
        FUZZ_ASSERT(!d, "destroy did not clear the pointer");
        size_t fds_after = count_dir("/proc/self/fd", "");
        size_t shm_after = count_dir("/dev/shm", shm_prefix);
        if (fds_after != fds_before)
                dump_fds();
        FUZZ_ASSERT(fds_after == fds_before, "%zu descriptors open before, %zu after", fds_before, fds_after);
        FUZZ_ASSERT(shm_after == shm_before, "%zu shared-memory segments before, %zu after", shm_before, shm_after);
        return 0;
}
