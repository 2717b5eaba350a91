/* http.h — the daemon's HTTP listener for GET /metrics (libmicrohttpd, no
 * thread of its own): the reactor polls the descriptors it fills in, calls
 * dispatch when one is readable and expire before every sleep. Every call,
 * and the render callback, runs on the reactor thread. */
#ifndef HVD_HTTP_H
#define HVD_HTTP_H

#include <stddef.h>
#include <stdint.h>
#include <zmq.h>

typedef struct hvd_metrics hvd_metrics_t;
typedef struct hvd_http hvd_http_t;

/* Makes the body of one GET /metrics response: 0 and a malloc'd string
 * (the listener frees it), or < 0 (the client gets a 500). */
typedef int (*hvd_http_render_fn)(void *userdata, char **body, size_t *len);

/* Binds "ADDRESS:PORT" (an IPv4 or IPv6 literal, "[::1]:9464", or a host
 * name; port 0 picks a free one) and listens. Requests counted in m
 * (control_requests; the refused ones in rejected[HVD_METRICS_SOCK_HTTP]);
 * m and userdata are borrowed and must outlive the listener. Returns 0 and
 * a new listener in *ret (free with hvd_http_destroy), or < 0 with a
 * message in err (*ret untouched). */
int hvd_http_new(const char *address, hvd_http_render_fn render, void *userdata, hvd_metrics_t *m, hvd_http_t **ret,
                 char *err, size_t err_len);
/* Closes every connection and the listening socket. NULL-safe; sets *h = NULL. */
void hvd_http_destroy(hvd_http_t **h);

/* The bound address, e.g. "127.0.0.1:9464". Borrowed, valid until destroy. */
const char *hvd_http_address(const hvd_http_t *h);

/* Poll items: at most this many. */
size_t hvd_http_max_items(const hvd_http_t *h);
/* Fills items with the descriptors to poll, each for ZMQ_POLLIN, and
 * returns how many. */
size_t hvd_http_fill_items(hvd_http_t *h, zmq_pollitem_t *items);
/* Serves what is ready after a poll that reported ZMQ_POLLIN on items
 * filled by the last fill. Never blocks. */
void hvd_http_dispatch(hvd_http_t *h, const zmq_pollitem_t *items, size_t n, uint64_t now_usec);
/* Closes connections past their deadline and does the work that is due
 * without a poll event; returns when it must be called next (the reactor
 * sleeps no longer), or UINT64_MAX when nothing is pending. */
uint64_t hvd_http_expire(hvd_http_t *h, uint64_t now_usec);

#endif
