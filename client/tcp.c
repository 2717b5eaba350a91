/* tcp.c — rank-to-rank TCP connections for the data plane between nodes
 * (see tcp.h). Invariant: conn[p] is either -1 or a connected, non-blocking
 * socket whose peer proved it is rank p of this job (a 16-byte hello).
 * A large exchange whose caller allows it sends on a second thread (the
 * sender, started on first use) while the calling thread receives: the
 * send copies then run beside the receive copies and the reductions
 * instead of between them. The sender touches only the send direction
 * (its dir_t, sent_frames, the corruption hook); the two meet in the
 * stream's callbacks and in `progress`, a futex word the receiver bumps
 * after every frame it hands on. */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <linux/futex.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "crc32c.h"
#include "hvd.h"
#include "tcp.h"
#include "thread.h"
#include "util.h"

#define HELLO_MAGIC   UINT32_C(0x68766474) /* "hvdt" */
#define SOCKBUF_BYTES (4 << 20)
#define POLL_SLICE_MS 50
/* exchanges of at least this many bytes each way use the sender thread:
 * below it, handing the send side over costs more than it overlaps */
#define SPLIT_BYTES (UINT64_C(1) << 20)

struct dir;

/* The sender thread and its one job at a time. */
typedef struct sender {
        pthread_t thread;
        bool started;
        pthread_mutex_t lock;
        pthread_cond_t cond;
        /* under lock */
        bool quit;
        const hvd_tcp_stream_t *job; /* handed over, not yet taken */
        struct dir *d;
        bool busy; /* from the hand-over to the job's end */
        int result;
        char err[256];
        /* without the lock */
        _Atomic uint32_t progress; /* frames the receiver has handed on */
        atomic_bool waiting;       /* the sender sleeps on progress */
        atomic_bool stop;          /* the receiver failed: stop sending */
        atomic_bool failed;        /* the sender failed: stop receiving */
} sender_t;

struct hvd_tcp {
        int rank, size;
        int listen_fd;
        int *conn; /* [size] */
        char **addrs;
        uint64_t job_hash;
        uint64_t timeout_usec;
        uint64_t op_deadline; /* the current collective must end by then (0 = none) */
        hvd_wait_check_fn check;
        void *userdata;
        bool aborted;
        bool checksum;                       /* a CRC-32C after every frame, both ways */
        int64_t corrupt_frame;               /* test hook (HVD_TEST_RING_CORRUPT): -1 = off */
        uint64_t *sent_frames, *recv_frames; /* [size]: frames per connection and direction */
        bool send_thread;                    /* large exchanges may use the sender */
        uint64_t frame_bytes;                /* of every exchange's frames */
        bool split;                          /* the current exchange does */
        sender_t snd;
};

typedef struct {
        uint32_t magic;
        uint32_t rank;
        uint64_t job_hash;
} tcp_hello_t;

/* Whether the kernel grants SOCKBUF_BYTES to SO_SNDBUF/SO_RCVBUF (its
 * net.core.[rw]mem_max). A smaller grant would also switch off TCP's own
 * buffer autotuning, which grows to net.ipv4.tcp_[rw]mem's maximum (4 and
 * 6 MiB by default): then the buffers are better left to the kernel. */
static bool sockbuf_granted(const char *path) {
        FILE *f = fopen(path, "re");
        unsigned long long max = 0;
        bool ok = f && fscanf(f, "%llu", &max) == 1 && max >= SOCKBUF_BYTES;
        if (f)
                fclose(f);
        return ok;
}

static void tune(int fd) {
        static int wmem = -1, rmem = -1; /* benign race: every thread computes the same */
        if (wmem < 0)
                wmem = sockbuf_granted("/proc/sys/net/core/wmem_max");
        if (rmem < 0)
                rmem = sockbuf_granted("/proc/sys/net/core/rmem_max");
        int one = 1, buf = SOCKBUF_BYTES;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (wmem)
                setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
        if (rmem)
                setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
}

int hvd_tcp_listen(const char *bind_ip, unsigned port_lo, unsigned port_hi, const char *advertise_ip,
                   unsigned advertise_port, char *addr, size_t addr_len) {
        struct sockaddr_in sa = { .sin_family = AF_INET };
        if (!bind_ip || !*bind_ip)
                sa.sin_addr.s_addr = htonl(INADDR_ANY);
        else if (inet_pton(AF_INET, bind_ip, &sa.sin_addr) != 1)
                return -EINVAL;
        if (port_hi < port_lo || port_hi > 65535)
                return -EINVAL;
        int buf = SOCKBUF_BYTES, r = -EADDRINUSE;
        bool grant = sockbuf_granted("/proc/sys/net/core/rmem_max");
        /* the first free port of [port_lo, port_hi]; 0 = any the kernel picks */
        for (unsigned port = port_lo; port <= port_hi; port++) {
                int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
                if (fd < 0)
                        return -errno;
                if (grant)
                        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
                sa.sin_port = htons((uint16_t) port);
                if (bind(fd, (struct sockaddr *) &sa, sizeof sa) == 0 && listen(fd, 128) == 0) {
                        socklen_t len = sizeof sa;
                        getsockname(fd, (struct sockaddr *) &sa, &len);
                        snprintf(addr, addr_len, "%s:%u", advertise_ip,
                                 advertise_port ? advertise_port : (unsigned) ntohs(sa.sin_port));
                        return fd;
                }
                r = -errno;
                close(fd);
                if (r != -EADDRINUSE && r != -EACCES)
                        break;
        }
        return r;
}

int hvd_tcp_route_addr(const char *endpoint, char *buf, size_t len) {
        char host[256];
        if (strncmp(endpoint, "tcp://", 6) != 0)
                return -EINVAL;
        snprintf(host, sizeof host, "%s", endpoint + 6);
        char *colon = strrchr(host, ':');
        if (!colon)
                return -EINVAL;
        *colon = 0;
        char ip[INET_ADDRSTRLEN];
        if (hvd_tcp_resolve(host, ip, sizeof ip) < 0)
                return -ENOENT;
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(9) };
        inet_pton(AF_INET, ip, &sa.sin_addr);
        if ((ntohl(sa.sin_addr.s_addr) >> 24) == 127)
                return -EADDRNOTAVAIL;
        /* a UDP connect picks the route without sending anything */
        int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        struct sockaddr_in me;
        socklen_t ml = sizeof me;
        int r = connect(fd, (struct sockaddr *) &sa, sizeof sa) < 0 || getsockname(fd, (struct sockaddr *) &me, &ml) < 0
                        ? -errno
                        : 0;
        close(fd);
        if (r == 0 && !inet_ntop(AF_INET, &me.sin_addr, ip, sizeof ip))
                r = -EINVAL;
        if (r == 0)
                snprintf(buf, len, "%s", ip);
        return r;
}

int hvd_tcp_resolve(const char *host, char *buf, size_t len) {
        struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM }, *res = NULL;
        if (getaddrinfo(host, NULL, &hints, &res) != 0 || !res)
                return -ENOENT;
        char tmp[INET_ADDRSTRLEN];
        const struct sockaddr_in *sa = (const struct sockaddr_in *) res->ai_addr;
        int r = inet_ntop(AF_INET, &sa->sin_addr, tmp, sizeof tmp) ? 0 : -EINVAL;
        if (r == 0)
                snprintf(buf, len, "%s", tmp);
        freeaddrinfo(res);
        return r;
}

int hvd_tcp_new(int listen_fd, int rank, int size, char *const *addrs, uint64_t job_hash, uint64_t timeout_usec,
                hvd_wait_check_fn check, void *userdata, hvd_tcp_t **ret) {
        hvd_tcp_t *t = calloc(1, sizeof *t);
        if (!t) {
                close(listen_fd);
                return -ENOMEM;
        }
        t->rank = rank;
        t->size = size;
        t->listen_fd = listen_fd;
        t->job_hash = job_hash;
        t->timeout_usec = timeout_usec;
        t->check = check;
        t->userdata = userdata;
        t->conn = malloc((size_t) size * sizeof *t->conn);
        for (int i = 0; t->conn && i < size; i++)
                t->conn[i] = -1; /* hvd_tcp_destroy closes what is >= 0, also on the way out below */
        t->addrs = calloc((size_t) size, sizeof *t->addrs);
        t->sent_frames = calloc((size_t) size, sizeof *t->sent_frames);
        t->recv_frames = calloc((size_t) size, sizeof *t->recv_frames);
        t->corrupt_frame = -1;
        t->send_thread = false;
        t->frame_bytes = HVD_TCP_FRAME_BYTES;
        pthread_mutex_init(&t->snd.lock, NULL);
        pthread_cond_init(&t->snd.cond, NULL);
        /* HVD_TEST_RING_CORRUPT=RANK:CHUNK: rank RANK changes one byte of
         * the CHUNK-th frame (from 0) it sends on each connection, after
         * computing its checksum — for tests of the checksum only: a fault
         * to inject where it acts, not a setting (client/settings.c) */
        const char *hook = getenv("HVD_TEST_RING_CORRUPT");
        int hr = -1;
        long long hc = -1;
        if (hook && sscanf(hook, "%d:%lld", &hr, &hc) == 2 && hr == rank && hc >= 0)
                t->corrupt_frame = hc;
        if (!t->conn || !t->addrs || !t->sent_frames || !t->recv_frames) {
                hvd_tcp_destroy(&t);
                return -ENOMEM;
        }
        for (int i = 0; i < size; i++) {
                if (!(t->addrs[i] = strdup(addrs[i] ? addrs[i] : ""))) {
                        hvd_tcp_destroy(&t);
                        return -ENOMEM;
                }
        }
        fcntl(listen_fd, F_SETFL, fcntl(listen_fd, F_GETFL) | O_NONBLOCK);
        *ret = t;
        return 0;
}

void hvd_tcp_destroy(hvd_tcp_t **tp) {
        if (!tp || !*tp)
                return;
        hvd_tcp_t *t = *tp;
        if (t->snd.started) {
                pthread_mutex_lock(&t->snd.lock);
                t->snd.quit = true;
                pthread_cond_broadcast(&t->snd.cond);
                pthread_mutex_unlock(&t->snd.lock);
                pthread_join(t->snd.thread, NULL);
        }
        pthread_mutex_destroy(&t->snd.lock);
        pthread_cond_destroy(&t->snd.cond);
        if (t->listen_fd >= 0)
                close(t->listen_fd);
        for (int i = 0; t->conn && i < t->size; i++)
                if (t->conn[i] >= 0)
                        close(t->conn[i]);
        for (int i = 0; t->addrs && i < t->size; i++)
                free(t->addrs[i]);
        free(t->addrs);
        free(t->conn);
        free(t->sent_frames);
        free(t->recv_frames);
        free(t);
        *tp = NULL;
}

void hvd_tcp_begin_op(hvd_tcp_t *t) {
        if (t)
                t->op_deadline = hvd_now_usec() + t->timeout_usec;
}

void hvd_tcp_abort(hvd_tcp_t *t) {
        if (t)
                t->aborted = true;
}

/* Waits on pfd for events with the job's deadline, checking for an abort;
 * 1 (no event) once *quit is set. The sender passes its stop flag, and
 * never runs the caller's check, which belongs to the calling thread. */
static int wait_fd_or(hvd_tcp_t *t, struct pollfd *pfd, int n, uint64_t start, const char *what, int peer,
                      const atomic_bool *quit, char *err, size_t err_len) {
        bool sender = quit == &t->snd.stop;
        for (;;) {
                if (quit && atomic_load(quit))
                        return 1;
                if (t->aborted) {
                        snprintf(err, err_len, "%s rank %d: the job was aborted", what, peer);
                        return HVD_EABORTED;
                }
                /* a link that keeps moving, but too slowly, must not stretch
                 * one collective past its deadline either */
                if (t->op_deadline && hvd_now_usec() > t->op_deadline) {
                        snprintf(err, err_len,
                                 "%s rank %d (%s): timed out after %.1f s for the whole collective (data still moving, "
                                 "too slowly)",
                                 what, peer, peer >= 0 && peer < t->size ? t->addrs[peer] : "?",
                                 (double) t->timeout_usec / 1e6);
                        return HVD_ETIMEOUT;
                }
                int k = poll(pfd, (nfds_t) n, POLL_SLICE_MS);
                if (k > 0)
                        return 0;
                if (k < 0 && errno != EINTR) {
                        snprintf(err, err_len, "%s rank %d: poll: %s", what, peer, strerror(errno));
                        return -errno;
                }
                if (t->check && !sender) {
                        int r = t->check(t->userdata, err, err_len);
                        if (r < 0)
                                return r;
                }
                if (hvd_now_usec() - start > t->timeout_usec) {
                        snprintf(err, err_len, "%s rank %d (%s): timed out after %.1f s", what, peer,
                                 peer >= 0 && peer < t->size ? t->addrs[peer] : "?", (double) t->timeout_usec / 1e6);
                        return HVD_ETIMEOUT;
                }
        }
}

static int wait_fd(hvd_tcp_t *t, struct pollfd *pfd, int n, uint64_t start, const char *what, int peer, char *err,
                   size_t err_len) {
        return wait_fd_or(t, pfd, n, start, what, peer, NULL, err, err_len);
}

static int full_io(hvd_tcp_t *t, int fd, void *buf, size_t len, bool send_it, int peer, uint64_t start, char *err,
                   size_t err_len) {
        uint8_t *p = buf;
        while (len) {
                ssize_t k = send_it ? send(fd, p, len, MSG_NOSIGNAL) : recv(fd, p, len, 0);
                if (k > 0) {
                        p += k;
                        len -= (size_t) k;
                        continue;
                }
                if (k == 0) {
                        snprintf(err, err_len, "connection to rank %d closed", peer);
                        return HVD_EABORTED;
                }
                if (errno != EAGAIN && errno != EINTR) {
                        snprintf(err, err_len, "connection to rank %d: %s", peer, strerror(errno));
                        return -errno;
                }
                struct pollfd pfd = { .fd = fd, .events = send_it ? POLLOUT : POLLIN };
                int r = wait_fd(t, &pfd, 1, start, "connecting to", peer, err, err_len);
                if (r < 0)
                        return r;
        }
        return 0;
}

/* Accepts connections until rank `peer` has connected (others are kept). */
static int accept_from(hvd_tcp_t *t, int peer, char *err, size_t err_len) {
        uint64_t start = hvd_now_usec();
        while (t->conn[peer] < 0) {
                int fd = accept4(t->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
                if (fd < 0) {
                        if (errno != EAGAIN && errno != EINTR) {
                                snprintf(err, err_len, "accept: %s", strerror(errno));
                                return -errno;
                        }
                        struct pollfd pfd = { .fd = t->listen_fd, .events = POLLIN };
                        int r = wait_fd(t, &pfd, 1, start, "waiting for a connection from", peer, err, err_len);
                        if (r < 0)
                                return r;
                        continue;
                }
                tcp_hello_t h;
                char e2[256];
                if (full_io(t, fd, &h, sizeof h, false, -1, start, e2, sizeof e2) < 0 || h.magic != HELLO_MAGIC ||
                    h.job_hash != t->job_hash || (int) h.rank >= t->size || (int) h.rank >= t->rank ||
                    t->conn[h.rank] >= 0) {
                        close(fd); /* not one of ours */
                        continue;
                }
                tune(fd);
                t->conn[h.rank] = fd;
        }
        return 0;
}

static int connect_to(hvd_tcp_t *t, int peer, char *err, size_t err_len) {
        char host[256];
        snprintf(host, sizeof host, "%s", t->addrs[peer]);
        char *colon = strrchr(host, ':');
        if (!colon) {
                snprintf(err, err_len, "rank %d has no data-plane address", peer);
                return HVD_EPROTO;
        }
        *colon = 0;
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t) atoi(colon + 1)) };
        if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
                snprintf(err, err_len, "rank %d: bad data-plane address '%s'", peer, t->addrs[peer]);
                return HVD_EPROTO;
        }
        uint64_t start = hvd_now_usec();
        for (;;) {
                int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
                if (fd < 0)
                        return -errno;
                tune(fd);
                /* non-blocking: a connect into a partition would otherwise
                 * wait for the kernel's SYN retries (minutes), not our deadline */
                fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
                int c = connect(fd, (struct sockaddr *) &sa, sizeof sa) == 0 ? 0 : -errno;
                if (c == -EINPROGRESS) {
                        struct pollfd pfd = { .fd = fd, .events = POLLOUT };
                        int e = 0;
                        socklen_t el = sizeof e;
                        c = wait_fd(t, &pfd, 1, start, "connecting to", peer, err, err_len);
                        if (c < 0) {
                                close(fd);
                                return c;
                        }
                        c = getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) < 0 ? -errno : -e;
                }
                if (c == 0) {
                        tcp_hello_t h = { .magic = HELLO_MAGIC, .rank = (uint32_t) t->rank, .job_hash = t->job_hash };
                        int r = full_io(t, fd, &h, sizeof h, true, peer, start, err, err_len);
                        if (r < 0) {
                                close(fd);
                                return r;
                        }
                        t->conn[peer] = fd;
                        return 0;
                }
                int e = -c;
                close(fd);
                if (e != ECONNREFUSED && e != EINTR && e != ETIMEDOUT && e != EHOSTUNREACH) {
                        snprintf(err, err_len, "cannot connect to rank %d at %s: %s", peer, t->addrs[peer],
                                 strerror(e));
                        return -e;
                }
                if (hvd_now_usec() - start > t->timeout_usec) {
                        snprintf(err, err_len, "cannot connect to rank %d at %s: %s", peer, t->addrs[peer],
                                 strerror(e));
                        return HVD_ETIMEOUT;
                }
                usleep(20000);
        }
}

static int get_conn(hvd_tcp_t *t, int peer, char *err, size_t err_len) {
        if (t->conn[peer] >= 0)
                return t->conn[peer];
        int r = peer > t->rank ? connect_to(t, peer, err, err_len) : accept_from(t, peer, err, err_len);
        return r < 0 ? r : t->conn[peer];
}

/* Connects to `to` and `from` as needed: connects first, accepts second
 * (a connect completes without the peer's help, so every accept waits only
 * for a connect that its peer makes before waiting itself). */
static int connect_pair(hvd_tcp_t *t, int to, int from, char *err, size_t err_len) {
        int peers[2] = { to, from };
        for (int phase = 0; phase < 2; phase++)
                for (int i = 0; i < 2; i++) {
                        int p = peers[i];
                        if (p < 0 || p == t->rank || (phase == 0) != (p > t->rank))
                                continue;
                        if (p >= t->size) {
                                snprintf(err, err_len, "rank %d out of range", p);
                                return -EINVAL;
                        }
                        int r = get_conn(t, p, err, err_len);
                        if (r < 0)
                                return r;
                }
        return 0;
}

/* One direction of a stream: segment seg, offset off in it, the current
 * frame [fbeg, fend), its running CRC and the 4-byte trailer. */
typedef struct dir {
        int peer, fd;
        size_t seg, nseg;
        const uint64_t *len;
        uint64_t off, fbeg, fend;
        uint64_t frame_bytes;
        uint32_t crc;
        uint8_t trailer[4];
        int tpos; /* -1: in the frame's data; 0..4: trailer bytes done */
} dir_t;

static void sender_wake(sender_t *w);

static void dir_frame(dir_t *d) {
        while (d->seg < d->nseg && d->off >= d->len[d->seg]) {
                d->seg++;
                d->off = 0;
        }
        d->fbeg = d->off;
        d->fend = d->seg < d->nseg ? HVD_MIN(d->off + d->frame_bytes, d->len[d->seg]) : 0;
        d->crc = 0;
        d->tpos = -1;
}

/* Sends what is ready; 1 if any byte moved, 0 if none could, < 0 error. */
static int stream_send(hvd_tcp_t *t, dir_t *d, const hvd_tcp_stream_t *s, char *err, size_t err_len) {
        int moved = 0;
        while (d->seg < d->nseg) {
                if (d->tpos >= 0) {
                        ssize_t k =
                                send(d->fd, d->trailer + d->tpos, 4 - (size_t) d->tpos, MSG_NOSIGNAL | MSG_DONTWAIT);
                        if (k <= 0)
                                goto io;
                        moved = 1;
                        if ((d->tpos += (int) k) < 4)
                                continue;
                        t->sent_frames[d->peer]++;
                        dir_frame(d);
                        continue;
                }
                uint64_t ready = 0;
                const uint8_t *p = s->send_at(s->ud, d->seg, d->off, &ready);
                ready = HVD_MIN(ready, d->fend - d->off);
                if (!ready)
                        return moved;
                uint8_t flipped;
                const uint8_t *src = p;
                size_t n = (size_t) ready;
                bool corrupt = t->corrupt_frame >= 0 && d->off == d->fbeg &&
                               t->sent_frames[d->peer] == (uint64_t) t->corrupt_frame;
                if (corrupt) {
                        /* test hook: the byte goes out changed, its CRC is the original's */
                        flipped = p[0] ^ 0x20;
                        src = &flipped;
                        n = 1;
                }
                ssize_t k = send(d->fd, src, n, MSG_NOSIGNAL | MSG_DONTWAIT);
                if (k <= 0)
                        goto io;
                if (corrupt)
                        t->corrupt_frame = -1;
                moved = 1;
                if (t->checksum)
                        d->crc = hvd_crc32c(d->crc, p, (size_t) k);
                d->off += (uint64_t) k;
                if (d->off < d->fend)
                        continue;
                if (t->checksum) {
                        memcpy(d->trailer, &d->crc, 4);
                        d->tpos = 0;
                } else {
                        t->sent_frames[d->peer]++;
                        dir_frame(d);
                }
                continue;
        io:
                if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
                        return moved;
                snprintf(err, err_len, "sending to rank %d: %s", d->peer, strerror(errno));
                return HVD_EABORTED;
        }
        return moved;
}

static int stream_recv(hvd_tcp_t *t, dir_t *d, const hvd_tcp_stream_t *s, char *err, size_t err_len) {
        int moved = 0;
        while (d->seg < d->nseg) {
                ssize_t k;
                if (d->tpos >= 0)
                        k = recv(d->fd, d->trailer + d->tpos, 4 - (size_t) d->tpos, MSG_DONTWAIT);
                else {
                        uint64_t room = 0;
                        uint8_t *p = s->recv_at(s->ud, d->seg, d->off, &room);
                        k = recv(d->fd, p, (size_t) HVD_MIN(room, d->fend - d->off), MSG_DONTWAIT);
                        if (k > 0 && t->checksum)
                                d->crc = hvd_crc32c(d->crc, p, (size_t) k);
                }
                if (k == 0) {
                        snprintf(err, err_len, "rank %d closed its data connection", d->peer);
                        return HVD_EABORTED;
                }
                if (k < 0) {
                        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
                                return moved;
                        snprintf(err, err_len, "receiving from rank %d: %s", d->peer, strerror(errno));
                        return HVD_EABORTED;
                }
                moved = 1;
                if (d->tpos >= 0) {
                        if ((d->tpos += (int) k) < 4)
                                continue;
                        uint32_t want;
                        memcpy(&want, d->trailer, 4);
                        if (want != d->crc) {
                                snprintf(err, err_len,
                                         "checksum mismatch in data from rank %d (chunk %" PRIu64
                                         " on that connection, %" PRIu64 " bytes): the data was corrupted in "
                                         "transit; the collective is aborted rather than give a wrong result",
                                         d->peer, t->recv_frames[d->peer], d->fend - d->fbeg);
                                return HVD_EPROTO;
                        }
                } else {
                        d->off += (uint64_t) k;
                        if (d->off < d->fend)
                                continue;
                        if (t->checksum) {
                                d->tpos = 0;
                                continue;
                        }
                }
                t->recv_frames[d->peer]++;
                if (s->received) {
                        int r = s->received(s->ud, d->seg, d->fbeg, d->fend - d->fbeg, err, err_len);
                        if (r < 0)
                                return r;
                }
                dir_frame(d);
                if (t->split)
                        sender_wake(&t->snd);
        }
        return moved;
}

/* The send direction on its own: sends what is ready, waits for room on
 * the socket or for the receiver's next frame. 0 when sent or stopped. */
static int send_loop(hvd_tcp_t *t, dir_t *d, const hvd_tcp_stream_t *s, char *err, size_t err_len) {
        sender_t *w = &t->snd;
        uint64_t start = hvd_now_usec();
        while (d->seg < d->nseg) {
                if (atomic_load(&w->stop))
                        return 0;
                if (t->aborted) {
                        snprintf(err, err_len, "exchanging data with rank %d: the job was aborted", s->to);
                        return HVD_EABORTED;
                }
                /* before looking at what is ready: a frame handed on after
                 * this changes the word, and the wait below returns at once */
                uint32_t seen = atomic_load(&w->progress);
                int ms = stream_send(t, d, s, err, err_len);
                if (ms < 0)
                        return ms;
                if (ms) {
                        start = hvd_now_usec();
                        continue;
                }
                uint64_t ready = 0;
                if (d->tpos < 0)
                        s->send_at(s->ud, d->seg, d->off, &ready);
                if (d->tpos >= 0 || ready) {
                        struct pollfd pfd = { .fd = d->fd, .events = POLLOUT };
                        int r = wait_fd_or(t, &pfd, 1, start, "exchanging data with", s->to, &w->stop, err, err_len);
                        if (r < 0)
                                return r;
                        continue;
                }
                /* the next bytes are still on their way in: the receiver
                 * enforces the deadlines of that wait */
                atomic_store(&w->waiting, true);
                if (!atomic_load(&w->stop)) {
                        struct timespec ts = { .tv_sec = 0, .tv_nsec = POLL_SLICE_MS * 1000000L };
                        syscall(SYS_futex, (uint32_t *) &w->progress, FUTEX_WAIT_PRIVATE, seen, &ts, NULL, 0);
                }
                atomic_store(&w->waiting, false);
        }
        return 0;
}

static void sender_wake(sender_t *w) {
        atomic_fetch_add(&w->progress, 1);
        if (atomic_load(&w->waiting))
                syscall(SYS_futex, (uint32_t *) &w->progress, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

static void *sender_main(void *arg) {
        hvd_tcp_t *t = arg;
        sender_t *w = &t->snd;
        pthread_mutex_lock(&w->lock);
        for (;;) {
                while (!w->quit && !w->job)
                        pthread_cond_wait(&w->cond, &w->lock);
                if (w->quit)
                        break;
                const hvd_tcp_stream_t *s = w->job;
                dir_t *d = w->d;
                w->job = NULL;
                pthread_mutex_unlock(&w->lock);
                char err[sizeof w->err] = "";
                int r = send_loop(t, d, s, err, sizeof err);
                if (r < 0)
                        atomic_store(&w->failed, true);
                pthread_mutex_lock(&w->lock);
                w->result = r;
                memcpy(w->err, err, sizeof err);
                w->busy = false;
                pthread_cond_broadcast(&w->cond);
        }
        pthread_mutex_unlock(&w->lock);
        return NULL;
}

/* Starts the sender once. false: it cannot run, the exchange stays on
 * one thread. */
static bool sender_start(hvd_tcp_t *t) {
        if (t->snd.started)
                return true;
        t->snd.started = hvd_thread_start(&t->snd.thread, sender_main, t) == 0;
        if (t->snd.started)
                pthread_setname_np(t->snd.thread, "hvd-tcp-send");
        return t->snd.started;
}

/* The receive direction here, the send direction on the sender. */
static int stream_split(hvd_tcp_t *t, dir_t *sd, dir_t *rd, const hvd_tcp_stream_t *s, char *err, size_t err_len) {
        sender_t *w = &t->snd;
        atomic_store(&w->stop, false);
        atomic_store(&w->failed, false);
        pthread_mutex_lock(&w->lock);
        w->job = s;
        w->d = sd;
        w->busy = true;
        pthread_cond_broadcast(&w->cond);
        pthread_mutex_unlock(&w->lock);
        t->split = true;
        int r = 0;
        uint64_t start = hvd_now_usec();
        while (rd->seg < rd->nseg && !atomic_load(&w->failed)) {
                if (t->aborted) {
                        snprintf(err, err_len, "exchanging data with rank %d: the job was aborted", s->from);
                        r = HVD_EABORTED;
                        break;
                }
                int mr = stream_recv(t, rd, s, err, err_len);
                if (mr < 0) {
                        r = mr;
                        break;
                }
                if (mr) {
                        start = hvd_now_usec();
                        continue;
                }
                struct pollfd pfd = { .fd = rd->fd, .events = POLLIN };
                int k = wait_fd_or(t, &pfd, 1, start, "exchanging data with", s->from, &w->failed, err, err_len);
                if (k < 0) {
                        r = k;
                        break;
                }
        }
        t->split = false;
        if (r < 0) {
                atomic_store(&w->stop, true);
                sender_wake(w);
        }
        pthread_mutex_lock(&w->lock);
        while (w->busy)
                pthread_cond_wait(&w->cond, &w->lock);
        if (r >= 0 && w->result < 0) {
                snprintf(err, err_len, "%s", w->err);
                r = w->result;
        }
        pthread_mutex_unlock(&w->lock);
        return r;
}

int hvd_tcp_stream(hvd_tcp_t *t, const hvd_tcp_stream_t *s, char *err, size_t err_len) {
        uint64_t stotal = 0, rtotal = 0;
        for (size_t i = 0; i < s->n_send; i++)
                stotal += s->send_len[i];
        for (size_t i = 0; i < s->n_recv; i++)
                rtotal += s->recv_len[i];
        int r = connect_pair(t, stotal ? s->to : -1, rtotal ? s->from : -1, err, err_len);
        if (r < 0)
                return r;
        dir_t sd = { .peer = s->to,
                     .fd = stotal ? t->conn[s->to] : -1,
                     .nseg = stotal ? s->n_send : 0,
                     .len = s->send_len,
                     .frame_bytes = t->frame_bytes };
        dir_t rd = { .peer = s->from,
                     .fd = rtotal ? t->conn[s->from] : -1,
                     .nseg = rtotal ? s->n_recv : 0,
                     .len = s->recv_len,
                     .frame_bytes = t->frame_bytes };
        dir_frame(&sd);
        dir_frame(&rd);
        if (s->concurrent && t->send_thread && sd.fd >= 0 && rd.fd >= 0 && stotal >= SPLIT_BYTES &&
            rtotal >= SPLIT_BYTES && sender_start(t))
                return stream_split(t, &sd, &rd, s, err, err_len);
        uint64_t start = hvd_now_usec();
        while (sd.seg < sd.nseg || rd.seg < rd.nseg) {
                if (t->aborted) {
                        snprintf(err, err_len, "exchanging data with rank %d: the job was aborted", s->to);
                        return HVD_EABORTED;
                }
                int ms = 0, mr = 0;
                if (sd.seg < sd.nseg && (ms = stream_send(t, &sd, s, err, err_len)) < 0)
                        return ms;
                if (rd.seg < rd.nseg && (mr = stream_recv(t, &rd, s, err, err_len)) < 0)
                        return mr;
                if (ms || mr) {
                        start = hvd_now_usec();
                        continue;
                }
                /* nothing moved: wait for room to send (only when there is
                 * something ready to send) or for data to arrive */
                struct pollfd pfd[2];
                int n = 0;
                uint64_t ready = 0;
                if (sd.seg < sd.nseg) {
                        if (sd.tpos < 0)
                                s->send_at(s->ud, sd.seg, sd.off, &ready);
                        if (sd.tpos >= 0 || ready)
                                pfd[n++] = (struct pollfd){ .fd = sd.fd, .events = POLLOUT };
                }
                if (rd.seg < rd.nseg)
                        pfd[n++] = (struct pollfd){ .fd = rd.fd, .events = POLLIN };
                if (!n) {
                        snprintf(err, err_len,
                                 "exchanging data with rank %d: nothing to send and nothing to "
                                 "receive (internal error)",
                                 s->to);
                        return HVD_EPROTO;
                }
                r = wait_fd(t, pfd, n, start, "exchanging data with", rd.seg < rd.nseg ? s->from : s->to, err, err_len);
                if (r < 0)
                        return r;
        }
        return 0;
}

typedef struct plain {
        const uint8_t *sbuf;
        uint8_t *rbuf;
} plain_t;

static const uint8_t *plain_send_at(void *ud, size_t seg, uint64_t off, uint64_t *ready) {
        (void) seg;
        plain_t *p = ud;
        *ready = UINT64_MAX;
        return p->sbuf + off;
}

static uint8_t *plain_recv_at(void *ud, size_t seg, uint64_t off, uint64_t *room) {
        (void) seg;
        plain_t *p = ud;
        *room = UINT64_MAX;
        return p->rbuf + off;
}

int hvd_tcp_sendrecv(hvd_tcp_t *t, int to, const void *sbuf, size_t slen, int from, void *rbuf, size_t rlen, char *err,
                     size_t err_len) {
        plain_t p = { sbuf, rbuf };
        uint64_t sl = slen, rl = rlen;
        hvd_tcp_stream_t s = {
                .to = to,
                .from = from,
                .n_send = 1,
                .n_recv = 1,
                .send_len = &sl,
                .recv_len = &rl,
                .send_at = plain_send_at,
                .recv_at = plain_recv_at,
                .ud = &p,
                .concurrent = true,
        };
        return hvd_tcp_stream(t, &s, err, err_len);
}

void hvd_tcp_set_checksum(hvd_tcp_t *t, bool on) {
        if (t)
                t->checksum = on;
}

void hvd_tcp_set_send_thread(hvd_tcp_t *t, bool on) {
        if (t)
                t->send_thread = on;
}

void hvd_tcp_set_frame_bytes(hvd_tcp_t *t, uint64_t bytes) {
        if (t)
                t->frame_bytes = HVD_MIN(HVD_MAX(bytes, HVD_TCP_FRAME_MIN_BYTES), HVD_TCP_FRAME_MAX_BYTES);
}
