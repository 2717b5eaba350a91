/* launcher_join.c — the secret, the root and the daemon of a job a cluster
 * launcher started (launcher_join.h). Local rank 0 decides which daemon
 * the node's ranks use and writes "PID ENDPOINT" into the job's
 * directory (renamed into place, so a reader sees all or nothing); the
 * other local ranks wait for that file, written by a live process, so
 * that every rank of a node uses one daemon and only one is started.
 * Directories and files here are the user's own, and checked to be. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "client.h"
#include "embedded.h"
#include "launcher_join.h"
#include "log.h"
#include "util.h"

#define PROBE_USEC   USEC_PER_SEC
#define POLL_USEC    (10 * USEC_PER_MSEC)
#define SECRET_BYTES 32

static struct {
        const char *mode;
        bool owner;         /* local rank 0: made the job's directory */
        hvd_embedded_t emb; /* the private daemon, when this rank runs it */
        uint64_t linger_usec;
        char dir[PATH_MAX];
        char endpoint[PATH_MAX + 32];
        char root_peer[320];
        char job_id[HVD_WIRE_MAX_JOB_ID + 1];
} J = { .mode = "" };

static int fail(char *err, size_t err_len, int r, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int fail(char *err, size_t err_len, int r, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, err_len, fmt, ap);
        va_end(ap);
        return r;
}

/* path is a directory of this user that nobody else may write or read. */
static int check_private_dir(const char *path, char *err, size_t err_len) {
        struct stat st;
        if (lstat(path, &st) < 0)
                return fail(err, err_len, -errno, "cannot use %s: %s", path, strerror(errno));
        if (!S_ISDIR(st.st_mode) || st.st_uid != getuid() || (st.st_mode & 077))
                return fail(err, err_len, -EPERM,
                            "%s is not a private directory of this user (mode %04o, owner %u): remove it, or set "
                            "TMPDIR",
                            path, (unsigned) (st.st_mode & 07777), (unsigned) st.st_uid);
        return 0;
}

static int make_private_dir(const char *path, char *err, size_t err_len) {
        if (mkdir(path, 0700) < 0 && errno != EEXIST)
                return fail(err, err_len, -errno, "cannot create %s: %s", path, strerror(errno));
        return check_private_dir(path, err, err_len);
}

/* ---- the secret ---- */

/* A new secret file at path: written under a temporary name, then linked
 * into place, so that of several ranks creating it one wins and every
 * rank reads the winner's. */
static int secret_create(const char *path, char *err, size_t err_len) {
        uint8_t raw[SECRET_BYTES];
        char hex[2 * SECRET_BYTES + 2], tmp[PATH_MAX + 32];
        if (getrandom(raw, sizeof raw, 0) != (ssize_t) sizeof raw)
                return fail(err, err_len, -EIO, "cannot read random bytes for %s", path);
        for (size_t i = 0; i < sizeof raw; i++)
                snprintf(hex + 2 * i, 3, "%02x", raw[i]);
        hex[2 * SECRET_BYTES] = '\n';
        hex[2 * SECRET_BYTES + 1] = 0;
        snprintf(tmp, sizeof tmp, "%s.%ld", path, (long) getpid());
        int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd < 0)
                return fail(err, err_len, -errno, "cannot create %s: %s", tmp, strerror(errno));
        bool ok = write(fd, hex, strlen(hex)) == (ssize_t) strlen(hex);
        ok = close(fd) == 0 && ok;
        int r = ok && link(tmp, path) < 0 && errno != EEXIST ? -errno : 0;
        unlink(tmp);
        if (!ok || r < 0)
                return fail(err, err_len, ok ? r : -EIO, "cannot write %s: %s", path, strerror(ok ? -r : EIO));
        return 0;
}

/* The secret: the first line of path, a file of this user that nobody else
 * may read. */
static int secret_read(hvd_settings_t *s, const char *path, char *err, size_t err_len) {
        int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return fail(err, err_len, -errno, "cannot read the job secret file %s: %s", path, strerror(errno));
        struct stat st;
        char line[HVD_WIRE_MAX_SECRET + 2];
        bool mine = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == getuid() && !(st.st_mode & 077);
        ssize_t n = mine ? read(fd, line, sizeof line - 1) : -1;
        close(fd);
        if (!mine)
                return fail(err, err_len, -EPERM,
                            "the job secret file %s must be a file of this user that only it can read (chmod 600)",
                            path);
        line[n < 0 ? 0 : n] = 0;
        size_t len = strcspn(line, "\r\n");
        if (n < 0 || len == 0 || len > HVD_WIRE_MAX_SECRET)
                return fail(err, err_len, -EINVAL, "the job secret file %s: its first line must hold 1 to %d bytes",
                            path, HVD_WIRE_MAX_SECRET);
        memcpy(s->secret, line, len);
        s->secret_len = len;
        return 0;
}

static int secret_load(hvd_settings_t *s, char *err, size_t err_len) {
        if (s->secret_len)
                return 0; /* HVD_JOB_SECRET */
        if (s->secret_file)
                return secret_read(s, s->secret_file, err, err_len);
        if (!s->home || s->home[0] != '/')
                return fail(err, err_len, -EINVAL,
                            "no job secret: set HVD_JOB_SECRET or HVD_JOB_SECRET_FILE (HOME is not set for "
                            "~/.hvd/secret)");
        char dir[PATH_MAX], path[PATH_MAX + 16];
        snprintf(dir, sizeof dir, "%s/.hvd", s->home);
        snprintf(path, sizeof path, "%s/secret", dir);
        int r = make_private_dir(dir, err, err_len);
        if (r >= 0 && access(path, F_OK) < 0)
                r = secret_create(path, err, err_len);
        return r < 0 ? r : secret_read(s, path, err, err_len);
}

/* ---- the job's directory and its daemon ---- */

/* FNV-1a of the job id: the directory's name (short: ipc paths are),
 * with the node's index, so that nodes whose TMPDIR is one shared
 * directory still get a daemon each. */
static uint64_t id_hash(const char *id) {
        uint64_t h = UINT64_C(1469598103934665603);
        for (; *id; id++)
                h = (h ^ (uint8_t) *id) * UINT64_C(1099511628211);
        return h;
}

static int job_dir(const hvd_settings_t *s, char *err, size_t err_len) {
        const char *tmp = s->tmp_dir && s->tmp_dir[0] == '/' ? s->tmp_dir : "/tmp";
        char base[PATH_MAX - 64];
        if ((size_t) snprintf(base, sizeof base, "%s/hvd-%u", tmp, (unsigned) getuid()) >= sizeof base)
                return fail(err, err_len, -ENAMETOOLONG, "TMPDIR '%s' is too long", tmp);
        int r = make_private_dir(base, err, err_len);
        if (r < 0)
                return r;
        snprintf(J.dir, sizeof J.dir, "%s/j-%016" PRIx64 "-%d", base, id_hash(s->job_id), s->cross_rank);
        return 0;
}

/* Writes "PID ENDPOINT" to DIR/coordinator, renamed into place. */
static int coordinator_publish(char *err, size_t err_len) {
        char tmp[PATH_MAX + 32], path[PATH_MAX + 32];
        snprintf(tmp, sizeof tmp, "%s/coordinator.tmp", J.dir);
        snprintf(path, sizeof path, "%s/coordinator", J.dir);
        FILE *f = fopen(tmp, "we");
        if (!f)
                return fail(err, err_len, -errno, "cannot write %s: %s", tmp, strerror(errno));
        fprintf(f, "%ld %s\n", (long) getpid(), J.endpoint);
        if (fclose(f) != 0 || rename(tmp, path) < 0)
                return fail(err, err_len, -EIO, "cannot write %s: %s", path, strerror(errno));
        return 0;
}

/* A private daemon for this job, in its directory; the first node's
 * listens for the other nodes' daemons at the root port. */
static int private_start(const hvd_settings_t *s, char *err, size_t err_len) {
        hvd_daemon_config_t cfg;
        hvd_daemon_config_init(&cfg);
        snprintf(cfg.runtime_dir, sizeof cfg.runtime_dir, "%s", J.dir);
        if (s->cross_size > 1 && s->cross_rank == 0)
                snprintf(cfg.peer_listen, sizeof cfg.peer_listen, "tcp://0.0.0.0:%u", s->root_port);
        cfg.log_level = LOG_WARNING;
        cfg.start_timeout_usec = s->start_timeout_usec;
        hvd_log_max_level = cfg.log_level;
        hvd_log_set_ident("hvd: coordinator");
        int r = hvd_embedded_start(&J.emb, &cfg, err, err_len);
        if (r < 0)
                return r;
        J.mode = "private daemon";
        J.linger_usec = s->start_timeout_usec;
        snprintf(J.job_id, sizeof J.job_id, "%s", s->job_id);
        snprintf(J.endpoint, sizeof J.endpoint, "ipc://%s/worker.sock", J.dir);
        return 0;
}

/* Local rank 0: the node's daemon when one answers, else a private one. */
static int owner_open(const hvd_settings_t *s, char *err, size_t err_len) {
        char path[PATH_MAX + 32], why[PATH_MAX + 256];
        int r = make_private_dir(J.dir, err, err_len);
        if (r < 0)
                return r;
        J.owner = true;
        snprintf(path, sizeof path, "%s/coordinator", J.dir);
        unlink(path); /* a crashed run's of the same job id */
        if (hvd_daemon_probe(s->runtime_dir, PROBE_USEC, why, sizeof why, NULL, 0, NULL) == 0) {
                J.mode = "node daemon";
                snprintf(J.endpoint, sizeof J.endpoint, "ipc://%s/worker.sock", s->runtime_dir);
        } else if ((r = private_start(s, err, err_len)) < 0)
                return r;
        return coordinator_publish(err, err_len);
}

/* DIR/coordinator as written by a live local rank 0: 1, else 0. */
static int coordinator_read(void) {
        char path[PATH_MAX + 32], line[PATH_MAX + 64] = "";
        snprintf(path, sizeof path, "%s/coordinator", J.dir);
        FILE *f = fopen(path, "re");
        if (!f)
                return 0;
        bool ok = fgets(line, sizeof line, f) != NULL;
        fclose(f);
        char *sp = strchr(line, ' ');
        long pid = ok && sp ? strtol(line, NULL, 10) : 0;
        if (pid <= 0 || (kill((pid_t) pid, 0) < 0 && errno != EPERM))
                return 0;
        sp[strcspn(sp, "\n")] = 0;
        snprintf(J.endpoint, sizeof J.endpoint, "%s", sp + 1);
        J.mode = strstr(J.endpoint, J.dir) ? "private daemon" : "node daemon";
        return 1;
}

static int follower_open(const hvd_settings_t *s, char *err, size_t err_len) {
        uint64_t deadline = hvd_now_usec() + s->start_timeout_usec;
        while (!coordinator_read()) {
                if (hvd_now_usec() >= deadline)
                        return fail(err, err_len, HVD_ETIMEOUT,
                                    "rank %d: local rank 0 of job %s did not name the node's daemon in %s/coordinator "
                                    "within %.1f s (is it running on this node?)",
                                    s->rank, s->job_id, J.dir, (double) s->start_timeout_usec / 1e6);
                struct timespec ts = { 0, (long) POLL_USEC * 1000 };
                nanosleep(&ts, NULL);
        }
        return 0;
}

static int root_peer(hvd_settings_t *s, char *err, size_t err_len) {
        if (s->cross_size < 2 || s->root_peer)
                return 0;
        if (!s->root_host[0])
                return fail(err, err_len, -EINVAL,
                            "%s placed this rank on node %d of %d but names no first host: set HVD_ROOT_PEER to "
                            "tcp://HOST:PORT of the first node's daemon",
                            s->rank_source, s->cross_rank, s->cross_size);
        snprintf(J.root_peer, sizeof J.root_peer, strchr(s->root_host, ':') ? "tcp://[%s]:%u" : "tcp://%s:%u",
                 s->root_host, s->root_port);
        s->root_peer = J.root_peer;
        return 0;
}

int hvd_launcher_join_open(hvd_settings_t *s, char *err, size_t err_len) {
        int r;
        if ((r = secret_load(s, err, err_len)) < 0 || (r = root_peer(s, err, err_len)) < 0)
                return r;
        if (s->coordinator) {
                J.mode = "HVD_COORDINATOR";
                return 0;
        }
        if ((r = job_dir(s, err, err_len)) < 0)
                return r;
        r = s->local_rank == 0 ? owner_open(s, err, err_len) : follower_open(s, err, err_len);
        if (r < 0) {
                hvd_launcher_join_close(false);
                return r;
        }
        s->coordinator = J.endpoint;
        return 0;
}

const char *hvd_launcher_join_mode(void) {
        return J.mode;
}

/* Removes the job's directory: its files, then itself. */
static void job_dir_remove(void) {
        static const char *const files[] = { "coordinator",  "coordinator.tmp", "worker.sock",
                                             "control.sock", "peer.endpoint",   "coordinatord.lock" };
        char path[PATH_MAX + 32];
        for (size_t i = 0; i < ELEMENTSOF(files); i++) {
                snprintf(path, sizeof path, "%s/%s", J.dir, files[i]);
                unlink(path);
        }
        rmdir(J.dir);
}

void hvd_launcher_join_close(bool linger) {
        if (J.emb.daemon && linger) {
                /* the other local ranks' goodbyes may still be on their way */
                uint64_t deadline = hvd_now_usec() + J.linger_usec;
                while (hvd_daemon_job_ranks_left(J.dir, J.job_id, (uint32_t) getpid(), PROBE_USEC) > 0 &&
                       hvd_now_usec() < deadline) {
                        struct timespec ts = { 0, (long) POLL_USEC * 1000 };
                        nanosleep(&ts, NULL);
                }
                (void) hvd_embedded_stop(&J.emb);
        }
        if (J.owner)
                job_dir_remove();
        J.owner = false;
        J.mode = "";
        J.dir[0] = J.endpoint[0] = J.root_peer[0] = 0;
}
