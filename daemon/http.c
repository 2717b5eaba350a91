/* http.c — GET /metrics over libmicrohttpd in external polling mode with
 * epoll: no thread of its own; the reactor polls our listening socket and
 * MHD's epoll descriptor and calls in, so the render callback reads the
 * daemon's state on the reactor thread. We accept connections ourselves:
 * at most MAX_CONNS at a time (the surplus gets a 503 at once rather than
 * a wait in the backlog), and each request must arrive whole and be
 * answered within CONN_DEADLINE_USEC of the connection's start or of the
 * previous response on it (a keep-alive connection also idles that long at
 * most). MHD limits a request head to what fits in CONN_MEMORY_BYTES. */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "http.h"
#include "log.h"
#include "metrics.h"
#include "util.h"

#define MAX_CONNS          16
#define CONN_DEADLINE_USEC (5 * USEC_PER_SEC)
#define CONN_MEMORY_BYTES  8192 /* MHD's pool per connection: request head, response head */
#define LISTEN_BACKLOG     64

typedef struct conn {
        int fd; /* -1: free */
        uint64_t deadline;
        bool shut;     /* past its deadline and shut down: MHD closes it on its next run */
        bool answered; /* the request in progress got our response */
} conn_t;

struct hvd_http {
        int fd; /* listening */
        struct MHD_Daemon *mhd;
        int epoll_fd; /* MHD's; readable when MHD has work */
        char address[INET6_ADDRSTRLEN + 16];
        hvd_http_render_fn render;
        void *userdata;
        hvd_metrics_t *m;
        conn_t conns[MAX_CONNS];
        size_t n_conns;
};

static const char text_type[] = "text/plain; charset=utf-8";
static const char metrics_type[] = "text/plain; version=0.0.4; charset=utf-8";

/* MHD's messages are about clients (a malformed request, a reset): debug level. */
__attribute__((format(printf, 2, 0))) static void mhd_log(void *userdata, const char *fmt, va_list ap) {
        if (LOG_DEBUG > hvd_log_max_level)
                return;
        char line[512];
        vsnprintf(line, sizeof line, fmt, ap);
        line[strcspn(line, "\r\n")] = 0;
        hvd_log_debug("metrics listener: %s", line);
}

static conn_t *conn_of(struct MHD_Connection *connection) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        return ci ? ci->socket_context : NULL;
}

/* A connection we added starts or ends. */
static void notify_connection(void *userdata, struct MHD_Connection *connection, void **socket_context,
                              enum MHD_ConnectionNotificationCode code) {
        hvd_http_t *h = userdata;
        if (code == MHD_CONNECTION_NOTIFY_STARTED) {
                const union MHD_ConnectionInfo *ci =
                        MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
                for (size_t i = 0; ci && i < MAX_CONNS; i++)
                        if (h->conns[i].fd == ci->connect_fd)
                                *socket_context = &h->conns[i];
                return;
        }
        /* closed: MHD closes the descriptor after this, so the slot is free
         * before the number can be reused */
        conn_t *c = *socket_context;
        if (c && c->fd >= 0) {
                c->fd = -1;
                h->n_conns--;
        }
        *socket_context = NULL;
}

/* The request line is in: the request's context is its connection. */
static void *request_started(void *userdata, const char *uri, struct MHD_Connection *connection) {
        conn_t *c = conn_of(connection);
        if (c)
                c->answered = false;
        return c;
}

static void request_completed(void *userdata, struct MHD_Connection *connection, void **request_context,
                              enum MHD_RequestTerminationCode toe) {
        hvd_http_t *h = userdata;
        conn_t *c = *request_context;
        *request_context = NULL;
        if (!c)
                return;
        /* refused by MHD (head too large or malformed) or never finished */
        if (!c->answered)
                h->m->rejected[HVD_METRICS_SOCK_HTTP]++;
        /* the next request on a kept-alive connection gets a deadline of its own */
        if (toe == MHD_REQUEST_TERMINATED_COMPLETED_OK && c->fd >= 0 && !c->shut)
                c->deadline = hvd_now_usec() + CONN_DEADLINE_USEC;
}

/* Queues a response; body is taken (free()d by MHD), or static when persistent. */
static enum MHD_Result respond(struct MHD_Connection *connection, unsigned status, const char *type, char *body,
                               size_t len, bool persistent) {
        struct MHD_Response *r =
                MHD_create_response_from_buffer(len, body, persistent ? MHD_RESPMEM_PERSISTENT : MHD_RESPMEM_MUST_FREE);
        if (!r) {
                if (!persistent)
                        free(body);
                return MHD_NO; /* MHD closes the connection */
        }
        enum MHD_Result ret = MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
        if (ret == MHD_YES && status == MHD_HTTP_METHOD_NOT_ALLOWED)
                ret = MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
        if (ret == MHD_YES)
                ret = MHD_queue_response(connection, status, r);
        MHD_destroy_response(r);
        return ret;
}

static enum MHD_Result respond_text(struct MHD_Connection *connection, unsigned status, const char *text) {
        return respond(connection, status, text_type, (char *) text, strlen(text), true);
}

/* Called once the request head is in (again for each piece of a body, which
 * we never read: the first call answers). MHD answers HEAD without the body. */
static enum MHD_Result handle_request(void *userdata, struct MHD_Connection *connection, const char *url,
                                      const char *method, const char *version, const char *upload_data,
                                      size_t *upload_data_size, void **request_context) {
        hvd_http_t *h = userdata;
        conn_t *c = *request_context;
        if (c && c->answered)
                return MHD_YES;
        if (c)
                c->answered = true;
        h->m->control_requests++;
        if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
                return respond_text(connection, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET and HEAD\n");
        /* url comes without the query string */
        if (strcmp(url, "/metrics") != 0)
                return respond_text(connection, MHD_HTTP_NOT_FOUND, "not found: try /metrics\n");
        char *body = NULL;
        size_t len = 0;
        if (h->render(h->userdata, &body, &len) < 0)
                return respond_text(connection, MHD_HTTP_INTERNAL_SERVER_ERROR, "cannot render the metrics\n");
        return respond(connection, MHD_HTTP_OK, metrics_type, body, len, false);
}

/* Binds address and listens; the bound address goes into h->address. */
static int listen_on(hvd_http_t *h, const char *address, char *err, size_t err_len) {
        char host[256];
        const char *colon = strrchr(address, ':');
        if (!colon || colon == address || !colon[1] || (size_t) (colon - address) >= sizeof host) {
                snprintf(err, err_len, "metrics_listen '%s': expected ADDRESS:PORT, e.g. 127.0.0.1:9464", address);
                return -EINVAL;
        }
        memcpy(host, address, (size_t) (colon - address));
        host[colon - address] = 0;
        if (host[0] == '[' && host[strlen(host) - 1] == ']') {
                memmove(host, host + 1, strlen(host));
                host[strlen(host) - 1] = 0;
        }
        char *end;
        errno = 0;
        unsigned long port = strtoul(colon + 1, &end, 10);
        if (errno || *end || port > 65535) {
                snprintf(err, err_len, "metrics_listen '%s': port must be 0..65535", address);
                return -EINVAL;
        }
        struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE };
        struct addrinfo *ai = NULL;
        int g = getaddrinfo(host, colon + 1, &hints, &ai);
        if (g != 0) {
                snprintf(err, err_len, "metrics_listen '%s': %s", address, gai_strerror(g));
                return -EINVAL;
        }
        int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        int one = 1;
        if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
            bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, LISTEN_BACKLOG) < 0) {
                int r = -errno;
                snprintf(err, err_len, "metrics_listen '%s': cannot listen: %s", address, strerror(-r));
                if (fd >= 0)
                        close(fd);
                freeaddrinfo(ai);
                return r;
        }
        freeaddrinfo(ai);
        h->fd = fd;

        struct sockaddr_storage ss = { .ss_family = AF_UNSPEC };
        socklen_t sl = sizeof ss;
        char ip[INET6_ADDRSTRLEN] = "?";
        unsigned bound = 0;
        if (getsockname(fd, (struct sockaddr *) &ss, &sl) < 0)
                ss.ss_family = AF_UNSPEC;
        if (ss.ss_family == AF_INET) {
                const struct sockaddr_in *s4 = (const struct sockaddr_in *) &ss;
                inet_ntop(AF_INET, &s4->sin_addr, ip, sizeof ip);
                bound = ntohs(s4->sin_port);
        } else if (ss.ss_family == AF_INET6) {
                const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *) &ss;
                inet_ntop(AF_INET6, &s6->sin6_addr, ip, sizeof ip);
                bound = ntohs(s6->sin6_port);
        }
        snprintf(h->address, sizeof h->address, ss.ss_family == AF_INET6 ? "[%s]:%u" : "%s:%u", ip, bound);
        return 0;
}

int hvd_http_new(const char *address, hvd_http_render_fn render, void *userdata, hvd_metrics_t *m, hvd_http_t **ret,
                 char *err, size_t err_len) {
        if (!MHD_is_feature_supported(MHD_FEATURE_EPOLL)) {
                snprintf(err, err_len, "metrics_listen '%s': this libmicrohttpd has no epoll support", address);
                return -EOPNOTSUPP;
        }
        hvd_http_t *h = calloc(1, sizeof *h);
        if (!h) {
                snprintf(err, err_len, "out of memory");
                return -ENOMEM;
        }
        h->fd = -1;
        h->render = render;
        h->userdata = userdata;
        h->m = m;
        for (size_t i = 0; i < MAX_CONNS; i++)
                h->conns[i].fd = -1;
        int r = listen_on(h, address, err, err_len);
        if (r < 0) {
                hvd_http_destroy(&h);
                return r;
        }
        /* MHD's own limit stays above ours: a connection it closed but has not
         * yet cleaned up still counts there */
        h->mhd = MHD_start_daemon(
                MHD_USE_EPOLL | MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ERROR_LOG, 0, NULL, NULL, handle_request, h,
                MHD_OPTION_EXTERNAL_LOGGER, mhd_log, h, MHD_OPTION_CONNECTION_LIMIT, (unsigned) (2 * MAX_CONNS),
                MHD_OPTION_CONNECTION_TIMEOUT, (unsigned) (CONN_DEADLINE_USEC / USEC_PER_SEC),
                MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t) CONN_MEMORY_BYTES, MHD_OPTION_NOTIFY_CONNECTION,
                notify_connection, h, MHD_OPTION_URI_LOG_CALLBACK, request_started, h, MHD_OPTION_NOTIFY_COMPLETED,
                request_completed, h, MHD_OPTION_END);
        const union MHD_DaemonInfo *di = h->mhd ? MHD_get_daemon_info(h->mhd, MHD_DAEMON_INFO_EPOLL_FD) : NULL;
        if (!di || di->epoll_fd < 0) {
                snprintf(err, err_len, "metrics_listen '%s': cannot start the HTTP server (libmicrohttpd)", address);
                hvd_http_destroy(&h);
                return -EIO;
        }
        h->epoll_fd = di->epoll_fd;
        *ret = h;
        return 0;
}

void hvd_http_destroy(hvd_http_t **hp) {
        if (!hp || !*hp)
                return;
        hvd_http_t *h = *hp;
        /* closes every connection; notify_connection still sees h */
        if (h->mhd)
                MHD_stop_daemon(h->mhd);
        if (h->fd >= 0)
                close(h->fd);
        free(h);
        *hp = NULL;
}

const char *hvd_http_address(const hvd_http_t *h) {
        return h->address;
}

size_t hvd_http_max_items(const hvd_http_t *h) {
        return 2;
}

size_t hvd_http_fill_items(hvd_http_t *h, zmq_pollitem_t *items) {
        items[0] = (zmq_pollitem_t){ .fd = h->fd, .events = ZMQ_POLLIN };
        items[1] = (zmq_pollitem_t){ .fd = h->epoll_fd, .events = ZMQ_POLLIN };
        return 2;
}

static void accept_all(hvd_http_t *h, uint64_t now) {
        for (;;) {
                struct sockaddr_storage ss;
                socklen_t sl = sizeof ss;
                int fd = accept4(h->fd, (struct sockaddr *) &ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
                if (fd < 0)
                        return; /* EAGAIN, or a client that left already */
                conn_t *c = NULL;
                for (size_t i = 0; i < MAX_CONNS && !c && h->n_conns < MAX_CONNS; i++)
                        if (h->conns[i].fd < 0)
                                c = &h->conns[i];
                if (!c) {
                        /* full: refuse rather than queue; a scraper retries */
                        static const char busy[] = "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n"
                                                   "Connection: close\r\n\r\n";
                        (void) !send(fd, busy, sizeof busy - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
                        close(fd);
                        continue;
                }
                *c = (conn_t){ .fd = fd, .deadline = now + CONN_DEADLINE_USEC };
                h->n_conns++;
                /* MHD closes fd when it fails; the slot is ours to free then,
                 * unless its close was notified already */
                if (MHD_add_connection(h->mhd, fd, (const struct sockaddr *) &ss, sl) != MHD_YES && c->fd == fd) {
                        c->fd = -1;
                        h->n_conns--;
                }
        }
}

void hvd_http_dispatch(hvd_http_t *h, const zmq_pollitem_t *items, size_t n, uint64_t now_usec) {
        if (n > 0 && items[0].revents)
                accept_all(h, now_usec);
        /* new connections, ready ones, MHD's timeouts: all in one run */
        (void) MHD_run(h->mhd);
}

uint64_t hvd_http_expire(hvd_http_t *h, uint64_t now_usec) {
        uint64_t next = UINT64_MAX;
        for (size_t i = 0; i < MAX_CONNS; i++) {
                conn_t *c = &h->conns[i];
                if (c->fd < 0 || c->shut)
                        continue;
                if (now_usec >= c->deadline) {
                        /* the descriptor stays MHD's: shutting it down makes its
                         * next read see the end, and MHD closes the connection */
                        (void) shutdown(c->fd, SHUT_RDWR);
                        c->shut = true;
                } else
                        next = HVD_MIN(next, c->deadline);
        }
        /* work MHD has left over (or a timeout of its own) that no poll event
         * would bring: run it now, and come back when MHD asks */
        MHD_UNSIGNED_LONG_LONG ms;
        bool due = MHD_get_timeout(h->mhd, &ms) == MHD_YES;
        if (due && ms == 0) {
                (void) MHD_run(h->mhd);
                due = MHD_get_timeout(h->mhd, &ms) == MHD_YES;
        }
        if (!due)
                return next;
        return HVD_MIN(next, now_usec + (uint64_t) HVD_MIN(ms, 3600000ULL) * USEC_PER_MSEC);
}
