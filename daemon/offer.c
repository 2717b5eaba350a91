/* offer.c — hosts offered to a root daemon for its elastic jobs. A daemon
 * with elastic_root sends a HostOffer to that root every heartbeat; the
 * root keeps one entry per host name (the latest connection wins), probes
 * each entry's connection every heartbeat and forgets it when it closed or
 * was silent past peer_timeout. The root's status lists what it holds;
 * launchers (hvdrun --discover-daemons) read it. Nothing here places a
 * worker: the elastic membership stays elastic.c's. */
#include "config.h"

#include "embedded.h"
#include "internal.h"

#define OFFERS_MAX 1024 /* hosts one root holds offers of */

typedef struct offer {
        Hvd__HostOffer msg; /* strings below */
        char host[HVD_WIRE_MAX_HOST + 1];
        char runtime_dir[HVD_WIRE_MAX_PATH + 1];
        char machine[65];
        uint8_t id[256]; /* routing id on the peer socket */
        size_t id_len;
        uint64_t last_heard_usec;
} offer_t;

struct hvd_offers {
        offer_t *v[OFFERS_MAX];
        size_t n;
        uint64_t last_probe_usec, last_sent_usec;
        char logged_error[512]; /* the offering side's last failure, logged once */
};

static hvd_offers_t *offers(hvd_daemon_t *d) {
        if (!d->offers)
                d->offers = calloc(1, sizeof *d->offers);
        return d->offers;
}

void offer_free(hvd_daemon_t *d) {
        if (!d->offers)
                return;
        for (size_t i = 0; i < d->offers->n; i++)
                free(d->offers->v[i]);
        free(d->offers);
        d->offers = NULL;
}

static void remove_at(hvd_offers_t *o, size_t i, const char *why) {
        hvd_log_notice("host %s is no longer offered (%s)", o->v[i]->host, why);
        free(o->v[i]);
        o->v[i] = o->v[--o->n];
}

void offer_receive(hvd_daemon_t *d, const uint8_t *id, size_t id_len, const Hvd__HostOffer *m) {
        hvd_offers_t *o = offers(d);
        if (!o || id_len > sizeof o->v[0]->id)
                return;
        size_t i = 0;
        while (i < o->n && strcmp(o->v[i]->host, m->host) != 0)
                i++;
        if (i == o->n) {
                if (o->n == OFFERS_MAX) {
                        io_error(d, d->peer_sock, id, id_len, -E2BIG,
                                 "host offer of %s refused: this root daemon holds %d offers already", m->host,
                                 OFFERS_MAX);
                        return;
                }
                if (!(o->v[i] = calloc(1, sizeof *o->v[i])))
                        return;
                o->n++;
                hvd_log_notice("host %s offered for elastic jobs (%u slots, runtime directory %s)", m->host, m->slots,
                               m->runtime_dir);
        }
        offer_t *e = o->v[i];
        snprintf(e->host, sizeof e->host, "%s", m->host);
        snprintf(e->runtime_dir, sizeof e->runtime_dir, "%s", m->runtime_dir);
        snprintf(e->machine, sizeof e->machine, "%s", m->machine);
        hvd__host_offer__init(&e->msg);
        e->msg.host = e->host;
        e->msg.runtime_dir = e->runtime_dir;
        e->msg.machine = e->machine;
        e->msg.slots = m->slots;
        e->msg.pid = m->pid;
        memcpy(e->id, id, id_len);
        e->id_len = id_len;
        e->last_heard_usec = hvd_now_usec();
        d->next_housekeeping = earliest(d->next_housekeeping, e->last_heard_usec + daemon_ping_usec(d));
}

/* The offering side: this host's offer to the root at elastic_root. */
static void send_offer(hvd_daemon_t *d, hvd_offers_t *o) {
        peer_t *p = uplink_peer(d, d->cfg.elastic_root);
        char err[512] = "";
        if (!p)
                snprintf(err, sizeof err, "cannot connect to the root daemon at %s", d->cfg.elastic_root);
        else {
                char machine[65] = "";
                (void) hvd_machine_id(machine, sizeof machine);
                Hvd__HostOffer m = HVD__HOST_OFFER__INIT;
                Hvd__Envelope env = HVD__ENVELOPE__INIT;
                m.host = d->cfg.elastic_host[0] ? d->cfg.elastic_host : d->host;
                m.slots = d->cfg.elastic_slots;
                m.runtime_dir = d->cfg.runtime_dir;
                m.machine = machine;
                m.pid = (uint32_t) getpid();
                env.body_case = HVD__ENVELOPE__BODY_HOST_OFFER;
                env.host_offer = &m;
                int r = io_send_peer(d, p, &env);
                if (r < 0 && r != -EAGAIN)
                        snprintf(err, sizeof err, "cannot send this host's offer to the root daemon at %s: %s",
                                 d->cfg.elastic_root, hvd_strerror(r));
        }
        if (err[0] && strcmp(err, o->logged_error) != 0)
                hvd_log_warning("%s", err);
        snprintf(o->logged_error, sizeof o->logged_error, "%s", err);
}

uint64_t offer_housekeeping(hvd_daemon_t *d, uint64_t now) {
        uint64_t hb = daemon_ping_usec(d), next = UINT64_MAX;
        if (!d->cfg.elastic_root[0] && !d->offers)
                return next;
        hvd_offers_t *o = offers(d);
        if (!o)
                return now + hb;
        if (d->cfg.elastic_root[0]) {
                if (!o->last_sent_usec || now - o->last_sent_usec >= hb) {
                        send_offer(d, o);
                        o->last_sent_usec = now;
                }
                next = o->last_sent_usec + hb;
        }
        if (!o->n)
                return next;
        /* a one-way ping: a closed connection is -EHOSTUNREACH at once (root.c) */
        bool probe = now - o->last_probe_usec >= hb;
        if (probe)
                o->last_probe_usec = now;
        for (size_t i = 0; i < o->n;) {
                offer_t *e = o->v[i];
                if (now - e->last_heard_usec > d->cfg.peer_timeout_usec) {
                        remove_at(o, i, "its daemon was silent past peer_timeout");
                        continue;
                }
                if (probe && d->peer_sock) {
                        if (root_ping_peer(d, e->id, e->id_len, now) == -EHOSTUNREACH) {
                                remove_at(o, i, "the connection to its daemon closed");
                                continue;
                        }
                }
                i++;
        }
        return earliest(next, o->last_probe_usec + hb);
}

int offer_status(hvd_daemon_t *d, uint64_t now, Hvd__Status *st, Hvd__HostOffer ***mem) {
        size_t n = d->offers ? d->offers->n : 0;
        if (!n)
                return 0;
        Hvd__HostOffer **v = calloc(n, sizeof *v);
        if (!v)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                offer_t *e = d->offers->v[i];
                e->msg.age_usec = now - e->last_heard_usec;
                v[i] = &e->msg;
        }
        st->n_offers = n;
        st->offers = v;
        *mem = v;
        return 0;
}
