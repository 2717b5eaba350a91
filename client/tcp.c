/* tcp.c — rank-to-rank TCP connections for the data plane between nodes
 * (see tcp.h). Invariant: conn[p] is either -1 or a connected, non-blocking
 * socket whose peer proved it is rank p of this job (a 16-byte hello). */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "hvd.h"
#include "tcp.h"
#include "util.h"

#define HELLO_MAGIC UINT32_C(0x68766474) /* "hvdt" */
#define SOCKBUF_BYTES (4 << 20)
#define POLL_SLICE_MS 50

struct hvd_tcp {
        int rank, size;
        int listen_fd;
        int *conn;   /* [size] */
        char **addrs;
        uint64_t job_hash;
        uint64_t timeout_usec;
        hvd_wait_check_fn check;
        void *userdata;
        bool aborted;
};

typedef struct {
        uint32_t magic;
        uint32_t rank;
        uint64_t job_hash;
} tcp_hello_t;

static void tune(int fd) {
        int one = 1, buf = SOCKBUF_BYTES;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
}

int hvd_tcp_listen(const char *bind_ip, const char *advertise_ip, char *addr, size_t addr_len) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        struct sockaddr_in sa = { .sin_family = AF_INET };
        if (!bind_ip || !*bind_ip)
                sa.sin_addr.s_addr = htonl(INADDR_ANY);
        else if (inet_pton(AF_INET, bind_ip, &sa.sin_addr) != 1) {
                close(fd);
                return -EINVAL;
        }
        int buf = SOCKBUF_BYTES;
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
        if (bind(fd, (struct sockaddr *) &sa, sizeof sa) < 0 || listen(fd, 128) < 0) {
                int r = -errno;
                close(fd);
                return r;
        }
        socklen_t len = sizeof sa;
        getsockname(fd, (struct sockaddr *) &sa, &len);
        snprintf(addr, addr_len, "%s:%u", advertise_ip, (unsigned) ntohs(sa.sin_port));
        return fd;
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
        t->addrs = calloc((size_t) size, sizeof *t->addrs);
        if (!t->conn || !t->addrs) {
                hvd_tcp_destroy(&t);
                return -ENOMEM;
        }
        for (int i = 0; i < size; i++) {
                t->conn[i] = -1;
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
        if (t->listen_fd >= 0)
                close(t->listen_fd);
        for (int i = 0; t->conn && i < t->size; i++)
                if (t->conn[i] >= 0)
                        close(t->conn[i]);
        for (int i = 0; t->addrs && i < t->size; i++)
                free(t->addrs[i]);
        free(t->addrs);
        free(t->conn);
        free(t);
        *tp = NULL;
}

void hvd_tcp_abort(hvd_tcp_t *t) {
        if (t)
                t->aborted = true;
}

/* Waits on pfd for events with the job's deadline, checking for an abort. */
static int wait_fd(hvd_tcp_t *t, struct pollfd *pfd, int n, uint64_t start, const char *what, int peer, char *err,
                   size_t err_len) {
        for (;;) {
                if (t->aborted) {
                        snprintf(err, err_len, "%s rank %d: the job was aborted", what, peer);
                        return HVD_EABORTED;
                }
                int k = poll(pfd, (nfds_t) n, POLL_SLICE_MS);
                if (k > 0)
                        return 0;
                if (k < 0 && errno != EINTR) {
                        snprintf(err, err_len, "%s rank %d: poll: %s", what, peer, strerror(errno));
                        return -errno;
                }
                if (t->check) {
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
                        snprintf(err, err_len, "cannot connect to rank %d at %s: %s", peer, t->addrs[peer], strerror(e));
                        return -e;
                }
                if (hvd_now_usec() - start > t->timeout_usec) {
                        snprintf(err, err_len, "cannot connect to rank %d at %s: %s", peer, t->addrs[peer], strerror(e));
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

int hvd_tcp_sendrecv(hvd_tcp_t *t, int to, const void *sbuf, size_t slen, int from, void *rbuf, size_t rlen,
                     char *err, size_t err_len) {
        int sfd = -1, rfd = -1;
        /* connects first, accepts second: a connect completes without the
         * peer's help, so every accept below waits only for a connect that
         * its peer makes before waiting itself */
        int peers[2] = { slen ? to : -1, rlen ? from : -1 };
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
        if (slen)
                sfd = t->conn[to];
        if (rlen)
                rfd = t->conn[from];
        const uint8_t *sp = sbuf;
        uint8_t *rp = rbuf;
        uint64_t start = hvd_now_usec();
        while (slen || rlen) {
                struct pollfd pfd[2];
                int n = 0, si = -1, ri = -1;
                if (slen) {
                        si = n;
                        pfd[n++] = (struct pollfd){ .fd = sfd, .events = POLLOUT };
                }
                if (rlen) {
                        ri = n;
                        pfd[n++] = (struct pollfd){ .fd = rfd, .events = POLLIN };
                }
                int r = wait_fd(t, pfd, n, start, "exchanging data with", slen ? to : from, err, err_len);
                if (r < 0)
                        return r;
                if (si >= 0 && (pfd[si].revents & (POLLOUT | POLLERR | POLLHUP))) {
                        ssize_t k = send(sfd, sp, slen, MSG_NOSIGNAL | MSG_DONTWAIT);
                        if (k > 0) {
                                sp += k;
                                slen -= (size_t) k;
                        } else if (k < 0 && errno != EAGAIN && errno != EINTR) {
                                snprintf(err, err_len, "sending to rank %d: %s", to, strerror(errno));
                                return HVD_EABORTED;
                        }
                }
                if (ri >= 0 && (pfd[ri].revents & (POLLIN | POLLERR | POLLHUP))) {
                        ssize_t k = recv(rfd, rp, rlen, MSG_DONTWAIT);
                        if (k > 0) {
                                rp += k;
                                rlen -= (size_t) k;
                        } else if (k == 0) {
                                snprintf(err, err_len, "rank %d closed its data connection", from);
                                return HVD_EABORTED;
                        } else if (errno != EAGAIN && errno != EINTR) {
                                snprintf(err, err_len, "receiving from rank %d: %s", from, strerror(errno));
                                return HVD_EABORTED;
                        }
                }
        }
        return 0;
}
