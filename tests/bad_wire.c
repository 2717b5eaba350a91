/* bad_wire.c — a misbehaving client for tests/test-bad-wire.sh: what a
 * broken or hostile program may send to hvd-coordinatord's sockets.
 *   bad_wire greeting ADDR KIND MAX_MS   raw stream socket (ADDR: a socket
 *        path, or HOST:PORT); KIND: garbage (random bytes), bad-mechanism
 *        (a ZMTP 3 greeting naming an unknown mechanism), half (the first
 *        10 bytes of a greeting, then nothing), silent (nothing at all).
 *        Exits 0 when the daemon closes the connection within MAX_MS.
 *   bad_wire flood ENDPOINT CONNS MSGS   CONNS DEALER connections, each
 *        sending MSGS messages: empty ones, several frames, random bytes,
 *        a Ready before any hello, a hello for a job too large; none is
 *        waited for. Exits 0 when all were handed to libzmq.
 *   bad_wire oversize ENDPOINT BYTES     one message of BYTES bytes.
 *   bad_wire many-tensors N NAME_LEN     (a worker: HVD_* environment) N
 *        allreduces with names NAME_LEN long submitted at once, so one
 *        cycle's readiness exceeds a small max_message_size; every result
 *        must be right. */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "hvd.h"
#include "hvd.pb-c.h"

static double now_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double) ts.tv_sec * 1e3 + (double) ts.tv_nsec / 1e6;
}

static int raw_connect(const char *addr) {
        int fd;
        if (addr[0] == '/') {
                struct sockaddr_un sa = { .sun_family = AF_UNIX };
                snprintf(sa.sun_path, sizeof sa.sun_path, "%s", addr);
                fd = socket(AF_UNIX, SOCK_STREAM, 0);
                if (fd < 0 || connect(fd, (struct sockaddr *) &sa, sizeof sa) < 0)
                        return -1;
                return fd;
        }
        char host[64];
        const char *colon = strrchr(addr, ':');
        if (!colon || (size_t) (colon - addr) >= sizeof host)
                return -1;
        memcpy(host, addr, (size_t) (colon - addr));
        host[colon - addr] = 0;
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t) atoi(colon + 1)) };
        if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
                return -1;
        fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0 || connect(fd, (struct sockaddr *) &sa, sizeof sa) < 0)
                return -1;
        return fd;
}

static int flow_greeting(const char *addr, const char *kind, double max_ms) {
        int fd = raw_connect(addr);
        if (fd < 0) {
                fprintf(stderr, "greeting: cannot connect to %s: %s\n", addr, strerror(errno));
                return 2;
        }
        uint8_t buf[4096];
        size_t len = 0;
        if (!strcmp(kind, "garbage")) {
                srand((unsigned) getpid());
                len = sizeof buf;
                for (size_t i = 0; i < len; i++)
                        buf[i] = (uint8_t) rand();
                buf[0] = 0x01; /* not 0xff: not a ZMTP 3 signature */
        } else if (!strcmp(kind, "bad-mechanism") || !strcmp(kind, "half")) {
                memset(buf, 0, 64);
                buf[0] = 0xff;
                buf[9] = 0x7f;
                buf[10] = 3;
                memcpy(buf + 12, "XHACK", 5);
                len = !strcmp(kind, "half") ? 10 : 64;
        } else if (strcmp(kind, "silent") != 0) {
                fprintf(stderr, "greeting: unknown kind %s\n", kind);
                return 2;
        }
        double t0 = now_ms();
        if (len && send(fd, buf, len, MSG_NOSIGNAL) < 0 && errno != EPIPE && errno != ECONNRESET) {
                fprintf(stderr, "greeting: send: %s\n", strerror(errno));
                return 2;
        }
        for (;;) {
                double left = max_ms - (now_ms() - t0);
                if (left <= 0)
                        break;
                struct pollfd p = { .fd = fd, .events = POLLIN };
                if (poll(&p, 1, (int) left + 1) <= 0)
                        continue;
                ssize_t n = recv(fd, buf, sizeof buf, 0);
                if (n <= 0) {
                        printf("%s: closed by the daemon after %.0f ms\n", kind, now_ms() - t0);
                        close(fd);
                        return 0;
                }
                /* the daemon's own greeting: read on */
        }
        printf("%s: still open after %.0f ms\n", kind, now_ms() - t0);
        close(fd);
        return 1;
}

static size_t pack(Hvd__Envelope *env, uint8_t *buf) {
        env->version = 1;
        return hvd__envelope__pack(env, buf);
}

static int flow_flood(const char *ep, int conns, int msgs) {
        void *ctx = zmq_ctx_new();
        void **socks = calloc((size_t) conns, sizeof *socks);
        uint8_t ready_buf[256], hello_buf[256], junk[512];
        Hvd__Ready ready = HVD__READY__INIT;
        uint32_t cached[] = { 0, 1, 2 };
        ready.cached = cached;
        ready.n_cached = 3;
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        env.body_case = HVD__ENVELOPE__BODY_READY;
        env.ready = &ready;
        size_t ready_len = pack(&env, ready_buf);
        Hvd__Hello h = HVD__HELLO__INIT;
        h.job_id = "flood";
        h.world_size = 1000000;
        h.local_size = 1000000;
        h.pid = (uint32_t) getpid();
        env.body_case = HVD__ENVELOPE__BODY_HELLO;
        env.hello = &h;
        size_t hello_len = pack(&env, hello_buf);
        long sent = 0, dropped = 0;
        srand((unsigned) getpid());
        for (int c = 0; c < conns; c++) {
                socks[c] = zmq_socket(ctx, ZMQ_DEALER);
                int zero = 0, hwm = msgs * 3 + 16;
                zmq_setsockopt(socks[c], ZMQ_LINGER, &zero, sizeof zero);
                zmq_setsockopt(socks[c], ZMQ_SNDHWM, &hwm, sizeof hwm);
                if (zmq_connect(socks[c], ep) < 0) {
                        fprintf(stderr, "flood: connect %s: %s\n", ep, zmq_strerror(zmq_errno()));
                        return 2;
                }
        }
        for (int m = 0; m < msgs; m++)
                for (int c = 0; c < conns; c++) {
                        void *s = socks[c];
                        int r;
                        switch ((m + c) % 6) {
                        case 0: r = zmq_send(s, "", 0, ZMQ_DONTWAIT); break; /* an empty message */
                        case 1: /* three frames: a valid envelope, then two more */
                                r = zmq_send(s, ready_buf, ready_len, ZMQ_DONTWAIT | ZMQ_SNDMORE);
                                if (r >= 0)
                                        r = zmq_send(s, "", 0, ZMQ_DONTWAIT | ZMQ_SNDMORE);
                                if (r >= 0)
                                        r = zmq_send(s, "tail", 4, ZMQ_DONTWAIT);
                                break;
                        case 2: {
                                size_t n = 1 + (size_t) rand() % sizeof junk;
                                for (size_t i = 0; i < n; i++)
                                        junk[i] = (uint8_t) rand();
                                r = zmq_send(s, junk, n, ZMQ_DONTWAIT);
                                break;
                        }
                        case 3: r = zmq_send(s, ready_buf, ready_len, ZMQ_DONTWAIT); break; /* before hello */
                        case 4: r = zmq_send(s, hello_buf, hello_len, ZMQ_DONTWAIT); break; /* too large a job */
                        default: /* an empty frame before a valid one */
                                r = zmq_send(s, "", 0, ZMQ_DONTWAIT | ZMQ_SNDMORE);
                                if (r >= 0)
                                        r = zmq_send(s, ready_buf, ready_len, ZMQ_DONTWAIT);
                                break;
                        }
                        if (r < 0)
                                dropped++;
                        else
                                sent++;
                }
        /* let libzmq write it all before closing */
        usleep(500 * 1000);
        for (int c = 0; c < conns; c++)
                zmq_close(socks[c]);
        free(socks);
        while (zmq_ctx_term(ctx) < 0 && zmq_errno() == EINTR)
                ;
        printf("flood: %d connections, %ld messages handed to libzmq, %ld refused by its queue\n", conns, sent,
               dropped);
        return 0;
}

static int flow_oversize(const char *ep, size_t bytes) {
        void *ctx = zmq_ctx_new();
        void *s = zmq_socket(ctx, ZMQ_DEALER);
        int zero = 0;
        zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
        if (zmq_connect(s, ep) < 0)
                return 2;
        uint8_t *buf = calloc(1, bytes);
        int r = zmq_send(s, buf, bytes, 0);
        usleep(500 * 1000);
        free(buf);
        zmq_close(s);
        while (zmq_ctx_term(ctx) < 0 && zmq_errno() == EINTR)
                ;
        printf("oversize: sent %zu bytes (%d)\n", bytes, r);
        return r < 0;
}

static int flow_many_tensors(int n, int name_len) {
        int r = hvd_init();
        if (r < 0) {
                fprintf(stderr, "many-tensors: hvd_init: %s\n", hvd_last_error());
                return 1;
        }
        int size = hvd_size(), rank = hvd_rank();
        float *data = calloc((size_t) n, sizeof *data);
        char **names = calloc((size_t) n, sizeof *names);
        hvd_handle_t **h = calloc((size_t) n, sizeof *h);
        int64_t one = 1;
        for (int i = 0; i < n; i++) {
                names[i] = malloc((size_t) name_len + 1);
                int k = snprintf(names[i], (size_t) name_len + 1, "tensor.%05d.", i);
                memset(names[i] + k, 'x', (size_t) (name_len - k));
                names[i][name_len] = 0;
                data[i] = (float) (rank + i);
                hvd_request_t q = HVD_REQUEST_INIT;
                q.name = names[i];
                q.input = &data[i];
                q.output = &data[i];
                q.ndim = 1;
                q.shape = &one;
                q.reduce_op = HVD_REDUCE_SUM;
                if ((r = hvd_allreduce_async(&q, &h[i])) < 0) {
                        fprintf(stderr, "many-tensors: submit %d: %s\n", i, hvd_last_error());
                        return 1;
                }
        }
        int bad = 0;
        for (int i = 0; i < n; i++) {
                r = hvd_handle_wait_timeout(h[i], 60ULL * 1000 * 1000);
                float want = (float) (size * i + size * (size - 1) / 2);
                if (r < 0) {
                        if (!bad++)
                                fprintf(stderr, "rank %d: many-tensors: %s: %s\n", rank, names[i],
                                        r == HVD_ETIMEOUT ? "no result within 60 s" : hvd_handle_error(h[i]));
                } else if (data[i] != want && !bad++)
                        fprintf(stderr, "rank %d: many-tensors: %s = %g, want %g\n", rank, names[i], data[i], want);
                hvd_handle_release(&h[i]);
                free(names[i]);
        }
        free(names);
        free(h);
        free(data);
        hvd_shutdown();
        if (!bad)
                printf("rank %d: many-tensors: %d allreduces with %d-byte names: all right\n", rank, n, name_len);
        return bad != 0;
}

int main(int argc, char **argv) {
        if (argc == 5 && !strcmp(argv[1], "greeting"))
                return flow_greeting(argv[2], argv[3], atof(argv[4]));
        if (argc == 5 && !strcmp(argv[1], "flood"))
                return flow_flood(argv[2], atoi(argv[3]), atoi(argv[4]));
        if (argc == 4 && !strcmp(argv[1], "oversize"))
                return flow_oversize(argv[2], (size_t) atol(argv[3]));
        if (argc == 4 && !strcmp(argv[1], "many-tensors"))
                return flow_many_tensors(atoi(argv[2]), atoi(argv[3]));
        fprintf(stderr, "usage: bad_wire greeting ADDR KIND MAX_MS | flood ENDPOINT CONNS MSGS | "
                        "oversize ENDPOINT BYTES | many-tensors N NAME_LEN\n");
        return 2;
}
