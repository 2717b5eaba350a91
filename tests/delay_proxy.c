/* delay_proxy.c — a TCP proxy that adds a fixed latency, for emulated
 * nodes on a kernel without netem: every byte read on one side is written
 * to the other side DELAY_US microseconds after it was read (reads less
 * than 5 us apart share the first one's time), order kept, both ways.
 * One thread per direction of each connection, 16 MiB of buffer per
 * direction (enough for 10 Gbit/s at 10 ms): pipes the bytes are spliced
 * into and out of, so that they are never copied (the proxy's own CPU
 * competes with what it carries on a small machine), as large as the
 * kernel lets it make them (fs.pipe-max-size, 1 MiB by default), made as
 * the bytes in flight need them and used in turn as one queue; where a
 * pipe of 1 MiB cannot be made, a ring filled by read() and drained by
 * send().
 *
 *   delay_proxy [--max-seconds N] [--copy] LISTEN_IP:PORT TARGET_IP:PORT|orig DELAY_US
 *
 * --copy: the ring, not pipes, for the test of both
 * (tests/test-delay-proxy.sh).
 *
 * PORT 0 listens on a free port. Target "orig": connections redirected
 * here by netfilter go on to the address they were sent to
 * (SO_ORIGINAL_DST), from a socket marked PROXY_MARK (SO_MARK) so that the
 * rule can leave them alone. With the rule on the output hook of an
 * emulated node (nft ... oifname LINK meta mark != 0x6876 redirect to
 * :PORT), every TCP connection that node opens over the link is delayed
 * once, and keeps the node's source address (which Open MPI checks).
 * Prints "listening IP:PORT (pipes of N bytes)" or "listening IP:PORT
 * (ring)" once ready, and "connection to IP:PORT" for each connection it
 * forwards.
 * SIGUSR1 stalls every connection: reads go on into the buffers, nothing is
 * written on until SIGUSR2, which lets what was held go, in order (a
 * stalled link that stays up, for the fault tests).
 * Exits on SIGTERM, or by itself after --max-seconds (default 3600). */
#include "config.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/netfilter_ipv4.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define RING_BYTES     (16u << 20)
#define MIN_PIPE_BYTES (1u << 20)
#define PIPES          (RING_BYTES / MIN_PIPE_BYTES)
#define STAMPS         65536u
#define MERGE_NSEC     5000u /* reads closer than this share one release time */
#define PROXY_MARK     0x6876

typedef struct {
        uint64_t end; /* bytes read up to here ... */
        uint64_t due; /* ... may be written from this time (ns) */
} stamp_t;

typedef struct conn conn_t;

typedef struct {
        conn_t *c;
        int src, dst;
        /* what was read and not yet written: spliced into pipes
         * [p_first, p_first + p_n) mod PIPES, p_held bytes in each; or,
         * with ring set, read into it */
        int pipe[PIPES][2]; /* -1: not made */
        size_t p_held[PIPES];
        unsigned p_first, p_n;
        uint8_t *ring;
        stamp_t *stamps;
} dir_t;

struct conn {
        dir_t d[2];
        atomic_int live; /* directions still running; the last one closes */
};

static uint64_t delay_ns;
static unsigned pipe_bytes; /* each pipe's size; 0: rings (--copy, or no pipe of 1 MiB) */
static atomic_bool stalled; /* SIGUSR1 sets, SIGUSR2 clears */

static void on_stall(int sig) {
        atomic_store(&stalled, sig == SIGUSR1);
}

static sigset_t stall_signals(void) {
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGUSR1);
        sigaddset(&set, SIGUSR2);
        return set;
}

static uint64_t now_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000000000u + (uint64_t) ts.tv_nsec;
}

/* The largest pipe this process may make, from RING_BYTES down to
 * MIN_PIPE_BYTES (root passes fs.pipe-max-size only with
 * CAP_SYS_RESOURCE); 0 without one of MIN_PIPE_BYTES. */
static unsigned pipe_size_allowed(void) {
        int fd[2], cap = -1;
        if (pipe2(fd, O_CLOEXEC) < 0)
                return 0;
        for (unsigned want = RING_BYTES; cap < 0 && want >= MIN_PIPE_BYTES; want /= 2)
                cap = fcntl(fd[0], F_SETPIPE_SZ, (int) want);
        close(fd[0]);
        close(fd[1]);
        return cap < (int) MIN_PIPE_BYTES ? 0 : (unsigned) cap;
}

/* d's pipe i, of pipe_bytes: 0, or -1 (no more descriptors or memory) */
static int pipe_make(dir_t *d, unsigned i) {
        int fd[2];
        if (pipe2(fd, O_CLOEXEC | O_NONBLOCK) < 0)
                return -1;
        if (fcntl(fd[0], F_SETPIPE_SZ, (int) pipe_bytes) < (int) pipe_bytes) {
                close(fd[0]);
                close(fd[1]);
                return -1;
        }
        d->pipe[i][0] = fd[0];
        d->pipe[i][1] = fd[1];
        return 0;
}

/* d's fields but its buffer, which dir_buffer() makes */
static void dir_init(dir_t *d, conn_t *c, int src, int dst) {
        *d = (dir_t){ .c = c, .src = src, .dst = dst };
        for (unsigned i = 0; i < PIPES; i++)
                d->pipe[i][0] = d->pipe[i][1] = -1;
}

/* d's first pipe, or its ring: 0, or -1 */
static int dir_buffer(dir_t *d) {
        d->p_first = 0;
        d->p_n = 1;
        if (pipe_bytes)
                return pipe_make(d, 0);
        d->ring = malloc(RING_BYTES);
        return d->ring ? 0 : -1;
}

static void dir_free(dir_t *d) {
        for (unsigned i = 0; i < PIPES; i++)
                if (d->pipe[i][0] >= 0) {
                        close(d->pipe[i][0]);
                        close(d->pipe[i][1]);
                }
        free(d->ring);
        free(d->stamps);
}

/* Up to room bytes from src, which poll() found readable, into the
 * buffer at stream offset in: bytes taken, 0 at end of stream, -1 with
 * errno (EAGAIN: nothing there; ENOBUFS: every pipe full, as a pipe can
 * be by its slots, a segment each, before it holds pipe_bytes). */
static ssize_t take_in(dir_t *d, uint64_t in, size_t room) {
        if (!d->ring) {
                for (;;) {
                        unsigned w = (d->p_first + d->p_n - 1) % PIPES, nx = (w + 1) % PIPES;
                        ssize_t k = splice(d->src, NULL, d->pipe[w][1], NULL, room, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
                        if (k > 0)
                                d->p_held[w] += (size_t) k;
                        /* an empty pipe refused: nothing there */
                        if (k >= 0 || errno != EAGAIN || d->p_held[w] == 0)
                                return k;
                        /* w refused what poll() saw: w is full */
                        if ((uint64_t) (d->p_n + 1) * pipe_bytes > RING_BYTES ||
                            (d->pipe[nx][0] < 0 && pipe_make(d, nx) < 0)) {
                                errno = ENOBUFS;
                                return -1;
                        }
                        d->p_n++;
                }
        }
        size_t at = (size_t) (in % RING_BYTES);
        if (room > RING_BYTES - at)
                room = RING_BYTES - at;
        return read(d->src, d->ring + at, room);
}

/* Up to len bytes of the buffer, from stream offset out, on to dst:
 * bytes passed, or -1 with errno. */
static ssize_t pass_out(dir_t *d, uint64_t out, size_t len) {
        if (!d->ring) {
                unsigned r = d->p_first; /* it holds the oldest bytes, p_held[r] of them */
                ssize_t k = splice(d->pipe[r][0], NULL, d->dst, NULL, len, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
                if (k > 0 && (d->p_held[r] -= (size_t) k) == 0 && d->p_n > 1) {
                        d->p_first = (r + 1) % PIPES;
                        d->p_n--;
                }
                return k;
        }
        size_t at = (size_t) (out % RING_BYTES);
        if (len > RING_BYTES - at)
                len = RING_BYTES - at;
        return send(d->dst, d->ring + at, len, MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* One direction is done with c; the last one closes and frees. */
static void conn_release(conn_t *c) {
        if (atomic_fetch_sub(&c->live, 1) != 1)
                return;
        close(c->d[0].src);
        close(c->d[1].src);
        for (int i = 0; i < 2; i++)
                dir_free(&c->d[i]);
        free(c);
}

static void *pump(void *arg) {
        dir_t *d = arg;
        uint64_t in = 0, out = 0, released = 0;
        unsigned head = 0, tail = 0; /* stamps[head, tail) mod STAMPS */
        bool eof = false, failed = false, pipe_full = false;
        prctl(PR_SET_TIMERSLACK, 1UL);
        sigset_t stall = stall_signals(); /* blocked by the thread that made this one */
        pthread_sigmask(SIG_UNBLOCK, &stall, NULL);
        for (;;) {
                uint64_t now = now_ns();
                while (head != tail && d->stamps[head % STAMPS].due <= now)
                        released = d->stamps[head++ % STAMPS].end;
                bool can_read = !eof && !pipe_full && in - out < RING_BYTES && tail - head < STAMPS;
                bool held = atomic_load(&stalled);
                bool can_write = released > out && !held;
                if (eof && out == in) {
                        shutdown(d->dst, SHUT_WR);
                        break;
                }
                /* a source not read from now is left out: its hang-up would wake us */
                struct pollfd pfd[2] = { { .fd = can_read ? d->src : -1, .events = POLLIN },
                                         { .fd = d->dst, .events = can_write ? POLLOUT : 0 } };
                struct timespec ts, *tsp = NULL;
                if (held) { /* look again for SIGUSR2 every millisecond */
                        ts = (struct timespec){ .tv_nsec = 1000000 };
                        tsp = &ts;
                } else if (!can_write && head != tail) {
                        uint64_t wait = d->stamps[head % STAMPS].due - now;
                        ts.tv_sec = (time_t) (wait / 1000000000u);
                        ts.tv_nsec = (long) (wait % 1000000000u);
                        tsp = &ts;
                }
                if (ppoll(pfd, 2, tsp, NULL) < 0) {
                        if (errno == EINTR)
                                continue;
                        failed = true;
                        break;
                }
                if (pfd[0].revents) {
                        ssize_t k = take_in(d, in, RING_BYTES - (size_t) (in - out));
                        /* every pipe full: the writes free them */
                        if (k < 0 && errno == ENOBUFS)
                                pipe_full = true;
                        if (k > 0) {
                                in += (uint64_t) k;
                                uint64_t due = now_ns() + delay_ns;
                                stamp_t *last = tail != head ? &d->stamps[(tail - 1) % STAMPS] : NULL;
                                if (last && due - last->due < MERGE_NSEC)
                                        last->end = in;
                                else
                                        d->stamps[tail++ % STAMPS] = (stamp_t){ .end = in, .due = due };
                        } else if (k == 0) {
                                eof = true;
                        } else if (errno != EAGAIN && errno != EINTR && errno != ENOBUFS) {
                                failed = true;
                                break;
                        }
                }
                if (pfd[1].revents & (POLLERR | POLLNVAL | POLLHUP)) {
                        failed = true;
                        break;
                }
                if (pfd[1].revents & POLLOUT) {
                        ssize_t k = pass_out(d, out, (size_t) (released - out));
                        if (k > 0) {
                                out += (uint64_t) k;
                                pipe_full = false;
                        } else if (k < 0 && errno != EAGAIN && errno != EINTR) {
                                failed = true;
                                break;
                        }
                }
        }
        if (failed) { /* end the other direction too */
                shutdown(d->src, SHUT_RDWR);
                shutdown(d->dst, SHUT_RDWR);
        }
        conn_release(d->c);
        return NULL;
}

static int parse_addr(const char *s, struct sockaddr_in *sa) {
        char host[64];
        const char *colon = strrchr(s, ':');
        if (!colon || (size_t) (colon - s) >= sizeof host)
                return -1;
        memcpy(host, s, (size_t) (colon - s));
        host[colon - s] = 0;
        char *end;
        long port = strtol(colon + 1, &end, 10);
        *sa = (struct sockaddr_in){ .sin_family = AF_INET, .sin_port = htons((uint16_t) port) };
        if (*end || port < 0 || port > 65535 || inet_pton(AF_INET, host, &sa->sin_addr) != 1)
                return -1;
        return 0;
}

static void nodelay(int fd) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

int main(int argc, char **argv) {
        long max_seconds = 3600;
        bool copy = false;
        for (;;) {
                if (argc > 2 && strcmp(argv[1], "--max-seconds") == 0) {
                        max_seconds = atol(argv[2]);
                        argv += 2;
                        argc -= 2;
                } else if (argc > 1 && strcmp(argv[1], "--copy") == 0) {
                        copy = true;
                        argv++;
                        argc--;
                } else
                        break;
        }
        struct sockaddr_in la, ta;
        char *end = NULL;
        long us = argc == 4 ? strtol(argv[3], &end, 10) : -1;
        bool orig = argc == 4 && strcmp(argv[2], "orig") == 0;
        if (argc != 4 || parse_addr(argv[1], &la) < 0 || (!orig && parse_addr(argv[2], &ta) < 0) || *end || us < 0 ||
            us > 10000000 || max_seconds <= 0) {
                fprintf(stderr,
                        "usage: delay_proxy [--max-seconds N] [--copy] LISTEN_IP:PORT TARGET_IP:PORT|orig DELAY_US\n");
                return 2;
        }
        delay_ns = (uint64_t) us * 1000u;
        alarm((unsigned) max_seconds);
        signal(SIGPIPE, SIG_IGN);
        struct sigaction sa = { .sa_handler = on_stall }; /* no SA_RESTART: ppoll returns */
        sigaction(SIGUSR1, &sa, NULL);
        sigaction(SIGUSR2, &sa, NULL);
        /* they land on the directions' threads, whose ppoll they wake;
         * here they would cut a connect() short */
        sigset_t stall = stall_signals();
        pthread_sigmask(SIG_BLOCK, &stall, NULL);
        int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
        setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (lfd < 0 || bind(lfd, (struct sockaddr *) &la, sizeof la) < 0 || listen(lfd, 128) < 0) {
                fprintf(stderr, "delay_proxy: cannot listen on %s: %s\n", argv[1], strerror(errno));
                return 1;
        }
        socklen_t len = sizeof la;
        getsockname(lfd, (struct sockaddr *) &la, &len);
        char ip[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &la.sin_addr, ip, sizeof ip);
        pipe_bytes = copy ? 0 : pipe_size_allowed();
        if (pipe_bytes)
                printf("listening %s:%u (pipes of %u bytes)\n", ip, (unsigned) ntohs(la.sin_port), pipe_bytes);
        else
                printf("listening %s:%u (ring)\n", ip, (unsigned) ntohs(la.sin_port));
        fflush(stdout);
        for (;;) {
                int a = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
                if (a < 0) {
                        if (errno == EINTR || errno == ECONNABORTED)
                                continue;
                        fprintf(stderr, "delay_proxy: accept: %s\n", strerror(errno));
                        return 1;
                }
                socklen_t tl = sizeof ta;
                if (orig && (getsockopt(a, SOL_IP, SO_ORIGINAL_DST, &ta, &tl) < 0 || ta.sin_port == la.sin_port)) {
                        fprintf(stderr, "delay_proxy: a connection not redirected here\n");
                        close(a);
                        continue;
                }
                int t = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), mark = PROXY_MARK;
                if (t >= 0 && orig && setsockopt(t, SOL_SOCKET, SO_MARK, &mark, sizeof mark) < 0) {
                        fprintf(stderr, "delay_proxy: SO_MARK: %s (root needed for target orig)\n", strerror(errno));
                        return 1;
                }
                if (t < 0 || connect(t, (struct sockaddr *) &ta, sizeof ta) < 0) {
                        inet_ntop(AF_INET, &ta.sin_addr, ip, sizeof ip);
                        fprintf(stderr, "delay_proxy: connect to %s:%u: %s\n", ip, (unsigned) ntohs(ta.sin_port),
                                strerror(errno));
                        close(a);
                        if (t >= 0)
                                close(t);
                        continue;
                }
                nodelay(a);
                nodelay(t);
                inet_ntop(AF_INET, &ta.sin_addr, ip, sizeof ip);
                printf("connection to %s:%u\n", ip, (unsigned) ntohs(ta.sin_port));
                fflush(stdout);
                /* each direction's thread waits in ppoll(), never in a call */
                fcntl(a, F_SETFL, fcntl(a, F_GETFL) | O_NONBLOCK);
                fcntl(t, F_SETFL, fcntl(t, F_GETFL) | O_NONBLOCK);
                conn_t *c = calloc(1, sizeof *c);
                bool ok = c != NULL;
                for (int i = 0; ok && i < 2; i++)
                        dir_init(&c->d[i], c, i ? t : a, i ? a : t);
                for (int i = 0; ok && i < 2; i++)
                        ok = (c->d[i].stamps = malloc(STAMPS * sizeof(stamp_t))) && dir_buffer(&c->d[i]) == 0;
                pthread_t th[2];
                if (ok)
                        atomic_init(&c->live, 2);
                if (!ok || pthread_create(&th[0], NULL, pump, &c->d[0]) != 0) {
                        fprintf(stderr, "delay_proxy: out of memory or threads\n");
                        for (int i = 0; c && i < 2; i++)
                                dir_free(&c->d[i]);
                        free(c);
                        close(a);
                        close(t);
                        continue;
                }
                pthread_detach(th[0]);
                if (pthread_create(&th[1], NULL, pump, &c->d[1]) != 0) {
                        /* the first direction sees the shutdown and ends */
                        shutdown(a, SHUT_RDWR);
                        shutdown(t, SHUT_RDWR);
                        conn_release(c);
                        continue;
                }
                pthread_detach(th[1]);
        }
}
