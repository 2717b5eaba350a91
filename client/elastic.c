/* elastic.c — a worker's side of elastic membership: before its hello, a
 * rank of an elastic job asks the root daemon (through its own daemon) for
 * its place in the next generation, and the answer replaces what the
 * launcher said (rank, sizes, host list, the generation's job id). The last
 * placement is remembered so that the next enrolment says which generation
 * and rank this process held. Every abort of a generation is a reset;
 * when and why this process's generation ended is kept for the timeline
 * of the next. */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <zmq.h>

#include "client.h"
#include "settings.h"
#include "timeline.h"
#include "util.h"

static struct {
        bool on;             /* this process is a rank of an elastic job */
        uint64_t generation; /* of the last placement (0: none) */
        uint32_t rank;
        bool sync;
        atomic_int waiting;
        char job_id[HVD_WIRE_MAX_JOB_ID + 1];
        /* the last placement's, and the end of the generation before it */
        uint32_t size, previous_size, joined, left;
        uint64_t ended_usec, ended_generation;
        char cause[512], joined_names[HVD_WIRE_MAX_TEXT + 1], left_names[HVD_WIRE_MAX_TEXT + 1];
} E;

uint64_t hvd_elastic_generation(void) {
        return hvd_is_initialized() && E.on ? E.generation : 0;
}

uint64_t hvd_elastic_placed_generation(void) {
        return E.on ? E.generation : 0;
}

int hvd_elastic_sync_needed(void) {
        return hvd_is_initialized() && E.on && E.sync;
}

int hvd_elastic_waiting(void) {
        return hvd_is_initialized() && E.on ? atomic_load(&E.waiting) : 0;
}

int hvd_elastic_abort_code(int code) {
        return E.on ? HVD_ERESET : code;
}

void hvd_elastic_generation_ended(const char *cause) {
        if (!E.on || !E.generation || E.ended_generation == E.generation)
                return;
        E.ended_generation = E.generation;
        E.ended_usec = hvd_now_usec();
        int w = atomic_load(&E.waiting);
        if (cause)
                snprintf(E.cause, sizeof E.cause, "%s", cause);
        else if (w > 0)
                snprintf(E.cause, sizeof E.cause, "%d worker%s waiting to join", w, w == 1 ? "" : "s");
        else
                snprintf(E.cause, sizeof E.cause, "hvd_shutdown");
}

int hvd_elastic_draw_reset(void) {
        if (!E.on || E.generation < 2 || !hvd_timeline_on())
                return 0;
        bool known = E.ended_generation + 1 == E.generation;
        hvd_timeline_reset_t r = {
                .generation = E.generation,
                .start_usec = known ? E.ended_usec : 0,
                .size = E.size,
                .previous_size = E.previous_size,
                .joined = E.joined,
                .left = E.left,
                .sync = E.sync,
                .joined_names = E.joined_names,
                .left_names = E.left_names,
                .cause = known ? E.cause : "",
        };
        hvd_timeline_reset(&r);
        return 1;
}

void hvd_elastic_hosts_updated(const Hvd__HostsUpdated *hu) {
        if (E.on)
                atomic_store(&E.waiting, (int) hu->waiting);
}

#define GONE_CHECK_MSEC 1000 /* how often a waiting enrolment checks that its daemon is there */

/* Whether nothing listens at an ipc:// endpoint any more: a daemon that was
 * killed leaves its socket file behind, where libzmq would retry unseen
 * for the whole wait. A plain connect tells (the daemon takes it as a
 * client that hung up). Other endpoints, and abstract sockets, are not
 * checked. */
static bool daemon_gone(const char *endpoint) {
        struct sockaddr_un a = { .sun_family = AF_UNIX };
        size_t n = strncmp(endpoint, "ipc://", 6) == 0 ? strlen(endpoint + 6) : sizeof a.sun_path;
        /* "ipc://@name" is an abstract socket: no file is left behind */
        if (n >= sizeof a.sun_path || endpoint[6] == '@')
                return false;
        memcpy(a.sun_path, endpoint + 6, n + 1);
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return false;
        int r = connect(fd, (const struct sockaddr *) &a, sizeof a), e = errno;
        close(fd);
        return r < 0 && (e == ECONNREFUSED || e == ENOENT);
}

/* Sends the enrolment on a socket of its own to the daemon and waits for
 * the placement (*ret, the caller frees it). */
static int ask(const hvd_settings_t *s, const char *endpoint, const char *host, Hvd__Envelope **ret) {
        void *ctx = zmq_ctx_new(), *sock = ctx ? zmq_socket(ctx, ZMQ_DEALER) : NULL;
        if (!sock) {
                if (ctx)
                        zmq_ctx_term(ctx);
                return hvd_error(-ENOMEM, "elastic job %s: cannot create a socket", s->job_id);
        }
        int zero = 0, r;
        zmq_setsockopt(sock, ZMQ_LINGER, &zero, sizeof zero);
        Hvd__Enroll en = HVD__ENROLL__INIT;
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        en.job_id = (char *) s->job_id;
        en.secret.data = (uint8_t *) s->secret;
        en.secret.len = s->secret_len;
        en.host = (char *) host;
        en.pid = (uint32_t) getpid();
        en.generation = E.generation;
        en.rank = E.generation ? E.rank : (uint32_t) s->rank; /* first: the launcher's rank */
        en.initial_size = (uint32_t) s->size;
        en.min_size = s->elastic_min;
        en.max_size = s->elastic_max;
        en.timeout_usec = s->elastic_timeout_usec;
        en.reset_limit = s->elastic_reset_limit;
        en.settle_usec = s->elastic_settle_usec;
        /* host 0 of the launcher's list is the root daemon's */
        en.root_peer = (char *) (s->cross_size > 1 && s->cross_rank > 0 && s->root_peer ? s->root_peer : "");
        en.reason = (char *) "";
        /* the root admits joiners as soon as all of their host's have enrolled */
        en.host_starting = E.generation ? 0 : (uint32_t) s->local_size;
        env.body_case = HVD__ENVELOPE__BODY_ENROLL;
        env.enroll = &en;
        uint64_t wait_usec = s->elastic_timeout_usec + s->elastic_settle_usec + s->start_timeout_usec;
        if (hvd_zmq_connect(sock, endpoint) < 0 || (r = hvd_wire_send(sock, &env, 0)) < 0) {
                r = hvd_error(HVD_ENODAEMON, "elastic job %s: cannot reach the coordinator at %s", s->job_id, endpoint);
                goto out;
        }
        zmq_pollitem_t it = { .socket = sock, .events = ZMQ_POLLIN };
        int n = 0;
        for (uint64_t waited_ms = 0; n == 0 && waited_ms < wait_usec / 1000; waited_ms += GONE_CHECK_MSEC) {
                if (daemon_gone(endpoint)) {
                        r = hvd_error(HVD_ENODAEMON,
                                      "elastic job %s: the coordinator at %s is gone (nothing listens there)",
                                      s->job_id, endpoint);
                        goto out;
                }
                long slice = (long) HVD_MIN((uint64_t) GONE_CHECK_MSEC, wait_usec / 1000 - waited_ms);
                do
                        n = zmq_poll(&it, 1, slice);
                while (n < 0 && zmq_errno() == EINTR);
        }
        if (n <= 0) {
                r = hvd_error(HVD_ETIMEOUT, "elastic job %s: no placement from the root daemon within %.0f s",
                              s->job_id, (double) wait_usec / 1e6);
                goto out;
        }
        zmq_msg_t msg;
        zmq_msg_init(&msg);
        char err[512];
        r = zmq_msg_recv(&msg, sock, 0) < 0
                    ? -zmq_errno()
                    : hvd_wire_decode(zmq_msg_data(&msg), zmq_msg_size(&msg), 0, ret, err, sizeof err);
        zmq_msg_close(&msg);
        if (r < 0)
                r = hvd_error(r, "elastic job %s: invalid answer from the coordinator", s->job_id);
out:
        zmq_close(sock);
        zmq_ctx_term(ctx);
        return r;
}

/* Puts the placement into s: the launcher's place is replaced. */
static int apply(hvd_settings_t *s, const Hvd__Placement *p) {
        size_t at = 0;
        for (size_t i = 0; i < p->n_hosts; i++) {
                size_t l = strlen(p->hosts[i]) + 1;
                if (i >= HVD_MAX_HOSTS || at + l > sizeof s->hosts_buf || at > UINT16_MAX)
                        return hvd_error(-E2BIG, "elastic job %s: the placement's host list is too long", s->job_id);
                memcpy(s->hosts_buf + at, p->hosts[i], l);
                s->host_at[i] = (uint16_t) at;
                at += l;
        }
        s->n_hosts = p->n_hosts;
        s->rank = (int) p->rank;
        s->size = (int) p->size;
        s->local_rank = (int) p->local_rank;
        s->local_size = (int) p->local_size;
        s->cross_rank = (int) p->cross_rank;
        s->cross_size = (int) p->cross_size;
        snprintf(E.job_id, sizeof E.job_id, "%s", p->job_id);
        s->job_id = E.job_id;
        E.previous_size = E.generation + 1 == p->generation ? E.size : 0;
        E.generation = p->generation;
        E.rank = p->rank;
        E.sync = p->sync;
        E.size = p->size;
        E.joined = p->joined;
        E.left = p->left;
        snprintf(E.joined_names, sizeof E.joined_names, "%s", p->joined_names);
        snprintf(E.left_names, sizeof E.left_names, "%s", p->left_names);
        atomic_store(&E.waiting, 0);
        return 0;
}

int hvd_elastic_enroll(hvd_settings_t *s) {
        E.on = s->elastic;
        if (!s->elastic)
                return 0;
        char ep[PATH_MAX + 32], host[HVD_WIRE_MAX_HOST + 1] = "";
        const char *endpoint = hvd_settings_coordinator(s, ep, sizeof ep);
        if (s->hostname)
                snprintf(host, sizeof host, "%s", s->hostname);
        else if (gethostname(host, sizeof host - 1) < 0)
                host[0] = 0;
        Hvd__Envelope *env = NULL;
        int r = ask(s, endpoint, host, &env);
        if (r < 0)
                return r;
        if (env->body_case == HVD__ENVELOPE__BODY_PLACEMENT && env->placement->code >= 0)
                r = apply(s, env->placement);
        else if (env->body_case == HVD__ENVELOPE__BODY_PLACEMENT)
                r = hvd_error(env->placement->code, "%s", env->placement->reason);
        else if (env->body_case == HVD__ENVELOPE__BODY_ERROR)
                r = hvd_error(env->error->code < 0 ? env->error->code : HVD_EPROTO, "elastic job %s: %s", s->job_id,
                              env->error->message);
        else
                r = hvd_error(HVD_EPROTO, "elastic job %s: unexpected answer from the coordinator", s->job_id);
        hvd_wire_free(&env);
        return r;
}
