/* delay_proxy.c — a TCP proxy that adds a fixed latency, for emulated
 * nodes on a kernel without netem: every byte read on one side is written
 * to the other side DELAY_US microseconds after it was read (reads less
 * than 5 us apart share the first one's time), order kept, both ways.
 * One thread per direction of each connection, a 16 MiB ring buffer per
 * direction (enough for 10 Gbit/s at 10 ms), no copy besides read/write.
 *
 *   delay_proxy [--max-seconds N] LISTEN_IP:PORT TARGET_IP:PORT|orig DELAY_US
 *
 * PORT 0 listens on a free port. Target "orig": connections redirected
 * here by netfilter go on to the address they were sent to
 * (SO_ORIGINAL_DST), from a socket marked PROXY_MARK (SO_MARK) so that the
 * rule can leave them alone. With the rule on the output hook of an
 * emulated node (nft ... oifname LINK meta mark != 0x6876 redirect to
 * :PORT), every TCP connection that node opens over the link is delayed
 * once, and keeps the node's source address (which Open MPI checks).
 * Prints "listening IP:PORT" once ready, and "connection to IP:PORT" for
 * each connection it forwards.
 * SIGUSR1 stalls every connection: reads go on into the buffers, nothing is
 * written on until SIGUSR2, which lets what was held go, in order (a
 * stalled link that stays up, for the fault tests).
 * Exits on SIGTERM, or by itself after --max-seconds (default 3600). */
#include "config.h"

#include <arpa/inet.h>
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

#define RING_BYTES (16u << 20)
#define STAMPS     65536u
#define MERGE_NSEC 5000u
#define PROXY_MARK 0x6876 /* reads closer than this share one release time */

typedef struct {
        uint64_t end; /* bytes read up to here ... */
        uint64_t due; /* ... may be written from this time (ns) */
} stamp_t;

typedef struct conn conn_t;

typedef struct {
        conn_t *c;
        int src, dst;
        uint8_t *ring;
        stamp_t *stamps;
} dir_t;

struct conn {
        dir_t d[2];
        atomic_int live; /* directions still running; the last one closes */
};

static uint64_t delay_ns;
static atomic_bool stalled; /* SIGUSR1 sets, SIGUSR2 clears */

static void on_stall(int sig) {
        atomic_store(&stalled, sig == SIGUSR1);
}

static uint64_t now_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000000000u + (uint64_t) ts.tv_nsec;
}

/* One direction is done with c; the last one closes and frees. */
static void conn_release(conn_t *c) {
        if (atomic_fetch_sub(&c->live, 1) != 1)
                return;
        close(c->d[0].src);
        close(c->d[1].src);
        for (int i = 0; i < 2; i++) {
                free(c->d[i].ring);
                free(c->d[i].stamps);
        }
        free(c);
}

static void *pump(void *arg) {
        dir_t *d = arg;
        uint64_t in = 0, out = 0, released = 0;
        unsigned head = 0, tail = 0; /* stamps[head, tail) mod STAMPS */
        bool eof = false, failed = false;
        prctl(PR_SET_TIMERSLACK, 1UL);
        for (;;) {
                uint64_t now = now_ns();
                while (head != tail && d->stamps[head % STAMPS].due <= now)
                        released = d->stamps[head++ % STAMPS].end;
                bool can_read = !eof && in - out < RING_BYTES && tail - head < STAMPS;
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
                        size_t at = (size_t) (in % RING_BYTES), room = RING_BYTES - (size_t) (in - out);
                        if (room > RING_BYTES - at)
                                room = RING_BYTES - at;
                        ssize_t k = read(d->src, d->ring + at, room);
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
                        } else if (errno != EAGAIN && errno != EINTR) {
                                failed = true;
                                break;
                        }
                }
                if (pfd[1].revents & (POLLERR | POLLNVAL | POLLHUP)) {
                        failed = true;
                        break;
                }
                if (pfd[1].revents & POLLOUT) {
                        size_t at = (size_t) (out % RING_BYTES), len = (size_t) (released - out);
                        if (len > RING_BYTES - at)
                                len = RING_BYTES - at;
                        ssize_t k = send(d->dst, d->ring + at, len, MSG_NOSIGNAL | MSG_DONTWAIT);
                        if (k > 0)
                                out += (uint64_t) k;
                        else if (k < 0 && errno != EAGAIN && errno != EINTR) {
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
        if (argc > 2 && strcmp(argv[1], "--max-seconds") == 0) {
                max_seconds = atol(argv[2]);
                argv += 2;
                argc -= 2;
        }
        struct sockaddr_in la, ta;
        char *end = NULL;
        long us = argc == 4 ? strtol(argv[3], &end, 10) : -1;
        bool orig = argc == 4 && strcmp(argv[2], "orig") == 0;
        if (argc != 4 || parse_addr(argv[1], &la) < 0 || (!orig && parse_addr(argv[2], &ta) < 0) || *end || us < 0 ||
            us > 10000000 || max_seconds <= 0) {
                fprintf(stderr, "usage: delay_proxy [--max-seconds N] LISTEN_IP:PORT TARGET_IP:PORT|orig DELAY_US\n");
                return 2;
        }
        delay_ns = (uint64_t) us * 1000u;
        alarm((unsigned) max_seconds);
        signal(SIGPIPE, SIG_IGN);
        struct sigaction sa = { .sa_handler = on_stall }; /* no SA_RESTART: ppoll returns */
        sigaction(SIGUSR1, &sa, NULL);
        sigaction(SIGUSR2, &sa, NULL);
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
        printf("listening %s:%u\n", ip, (unsigned) ntohs(la.sin_port));
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
                conn_t *c = calloc(1, sizeof *c);
                bool ok = c != NULL;
                for (int i = 0; ok && i < 2; i++) {
                        c->d[i] = (dir_t){ .c = c,
                                           .src = i ? t : a,
                                           .dst = i ? a : t,
                                           .ring = malloc(RING_BYTES),
                                           .stamps = malloc(STAMPS * sizeof(stamp_t)) };
                        ok = c->d[i].ring && c->d[i].stamps;
                }
                pthread_t th[2];
                if (ok)
                        atomic_init(&c->live, 2);
                if (!ok || pthread_create(&th[0], NULL, pump, &c->d[0]) != 0) {
                        fprintf(stderr, "delay_proxy: out of memory or threads\n");
                        for (int i = 0; c && i < 2; i++) {
                                free(c->d[i].ring);
                                free(c->d[i].stamps);
                        }
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
