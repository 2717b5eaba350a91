/* status_json.c — builds hvdctl's JSON documents with jansson and writes
 * them (see status_json.h). Invariants: every string given to jansson is
 * valid UTF-8 (repaired here first), every real is finite, and every
 * integer stands for an unsigned value: jansson holds integers as long
 * long, so a uint64_t above INT64_MAX (a daemon's random epoch, half the
 * time) goes in as its two's complement, and hvd_json_write() writes each
 * negative integer back as the unsigned value it stands for. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "status_json.h"

/* A uint64_t, in the two's complement form hvd_json_write() undoes. */
static json_t *u64(uint64_t v) {
        return json_integer((json_int_t) v);
}

/* A finite double (NaN and infinities have no JSON form). */
static json_t *real(double v) {
        return json_real(isfinite(v) ? v : 0.0);
}

/* Length of the UTF-8 sequence at p, or 0 when it is not one: a
 * continuation byte first, one missing, an overlong form, a surrogate, or
 * above U+10FFFF. */
static size_t utf8_len(const unsigned char *p) {
        unsigned char ch = p[0];
        if (ch < 0x80)
                return 1;
        size_t n = ch >= 0xf5 ? 0 : ch >= 0xf0 ? 4 : ch >= 0xe0 ? 3 : ch >= 0xc2 ? 2 : 0;
        uint32_t cp = n == 4 ? ch & 0x07u : n == 3 ? ch & 0x0fu : ch & 0x1fu;
        for (size_t i = 1; i < n; i++) {
                if ((p[i] & 0xc0) != 0x80)
                        return 0;
                cp = (cp << 6) | (p[i] & 0x3fu);
        }
        if ((n == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)))
                return 0;
        return n;
}

/* A string (NULL: ""), each byte that is not part of valid UTF-8 replaced by
 * U+FFFD; jansson escapes what JSON needs escaped. */
static json_t *text(const char *s) {
        const unsigned char *p = (const unsigned char *) (s ? s : "");
        size_t len = strlen((const char *) p), bad = 0;
        for (size_t i = 0, n; i < len; i += n ? n : 1)
                if (!(n = utf8_len(p + i)))
                        bad++;
        if (!bad)
                return json_stringn((const char *) p, len);
        char *fixed = malloc(len + 2 * bad + 1), *o = fixed;
        if (!fixed)
                return NULL;
        for (size_t i = 0, n; i < len; i += n ? n : 1) {
                if ((n = utf8_len(p + i))) {
                        memcpy(o, p + i, n);
                        o += n;
                } else {
                        memcpy(o, "\xef\xbf\xbd", 3);
                        o += 3;
                }
        }
        json_t *v = json_stringn(fixed, (size_t) (o - fixed));
        free(fixed);
        return v;
}

/* Adds key: v to o (v taken); a failure is remembered in *ok. */
static void put(json_t *o, const char *key, json_t *v, bool *ok) {
        if (!v || json_object_set_new(o, key, v) < 0)
                *ok = false;
}

static void push(json_t *a, json_t *v, bool *ok) {
        if (!v || json_array_append_new(a, v) < 0)
                *ok = false;
}

/* Returns o when every member went in, else NULL (o freed). */
static json_t *done(json_t *o, bool ok) {
        if (ok)
                return o;
        json_decref(o);
        return NULL;
}

static json_t *rank_info(const Hvd__RankInfo *ri) {
        json_t *o = json_object();
        bool ok = o != NULL;
        if (!o)
                return NULL;
        put(o, "rank", u64(ri->rank), &ok);
        put(o, "local_rank", u64(ri->local_rank), &ok);
        put(o, "pid", u64(ri->pid), &ok);
        put(o, "host", text(ri->host), &ok);
        put(o, "data_addr", text(ri->data_addr), &ok);
        put(o, "cross_rank", u64(ri->cross_rank), &ok);
        return done(o, ok);
}

static json_t *rank_status(const Hvd__RankStatus *r) {
        json_t *o = json_object();
        bool ok = o != NULL;
        if (!o)
                return NULL;
        put(o, "rank", u64(r->rank), &ok);
        put(o, "local", json_boolean(r->local), &ok);
        put(o, "host", text(r->host), &ok);
        put(o, "pid", u64(r->pid), &ok);
        put(o, "state", text(r->state), &ok);
        put(o, "seen", json_boolean(r->seen), &ok);
        put(o, "last_seen_usec", u64(r->last_seen_usec), &ok);
        put(o, "tensors_pending", u64(r->tensors_pending), &ok);
        put(o, "readies", u64(r->readies), &ok);
        put(o, "done_seq", u64(r->done_seq), &ok);
        put(o, "busy_usec", u64(r->busy_usec), &ok);
        put(o, "local_rank", u64(r->local_rank), &ok);
        put(o, "cross_rank", u64(r->cross_rank), &ok);
        return done(o, ok);
}

json_t *hvd_job_to_json(const Hvd__JobStatus *j) {
        json_t *o = json_object(), *ranks = json_array();
        bool ok = o && ranks;
        if (!ok) {
                json_decref(o);
                json_decref(ranks);
                return NULL;
        }
        put(o, "job_id", text(j->job_id), &ok);
        put(o, "size", u64(j->size), &ok);
        put(o, "state", text(j->state), &ok);
        for (size_t i = 0; i < j->n_ranks; i++)
                push(ranks, rank_info(j->ranks[i]), &ok);
        put(o, "ranks", ranks, &ok);
        put(o, "cycles", u64(j->cycles), &ok);
        put(o, "tensors_negotiated", u64(j->tensors_negotiated), &ok);
        put(o, "fused_ops", u64(j->fused_ops), &ok);
        put(o, "bytes_reduced", u64(j->bytes_reduced), &ok);
        put(o, "age_usec", u64(j->age_usec), &ok);
        put(o, "schedules", u64(j->schedules), &ok);
        put(o, "cache_hits", u64(j->cache_hits), &ok);
        put(o, "tensors_in_fused_ops", u64(j->tensors_in_fused_ops), &ok);
        put(o, "fast_path_tensors", u64(j->fast_path_tensors), &ok);
        put(o, "joined_ranks", u64(j->joined_ranks), &ok);
        put(o, "abort_reason", text(j->abort_reason), &ok);
        put(o, "stalled", text(j->stalled), &ok);
        put(o, "relay", text(j->relay), &ok);
        put(o, "negotiation_usec", u64(j->negotiation_usec), &ok);
        put(o, "data_usec", u64(j->data_usec), &ok);
        put(o, "throughput_bytes_per_sec", real(j->throughput_bytes_per_sec), &ok);
        put(o, "cache_hit_rate", real(j->cache_hit_rate), &ok);
        put(o, "mean_fused_bytes", u64(j->mean_fused_bytes), &ok);
        put(o, "root", json_boolean(j->root), &ok);
        put(o, "cross_size", u64(j->cross_size), &ok);
        put(o, "ranks_here", u64(j->ranks_here), &ok);
        put(o, "launcher", text(j->launcher), &ok);
        if (j->autotune) {
                const Hvd__AutotuneStatus *a = j->autotune;
                json_t *at = json_object();
                put(at, "state", text(a->state), &ok);
                put(at, "samples", u64(a->samples), &ok);
                put(at, "fusion_threshold", u64(a->fusion_threshold), &ok);
                put(at, "cycle_time_usec", u64(a->cycle_time_usec), &ok);
                put(at, "best_fusion_threshold", u64(a->best_fusion_threshold), &ok);
                put(at, "best_cycle_time_usec", u64(a->best_cycle_time_usec), &ok);
                put(at, "best_score", real(a->best_score), &ok);
                put(at, "generation", u64(a->generation), &ok);
                put(at, "applied_seq", u64(a->applied_seq), &ok);
                put(at, "switches", u64(a->switches), &ok);
                put(at, "best_switches", u64(a->best_switches), &ok);
                put(at, "fixed_switches", u64(a->fixed_switches), &ok);
                put(o, "autotune", at, &ok);
        }
        if (j->elastic) {
                json_t *e = json_object();
                put(e, "generation", u64(j->elastic->generation), &ok);
                put(e, "resets", u64(j->elastic->resets), &ok);
                put(e, "last_reset_usec", u64(j->elastic->last_reset_usec), &ok);
                put(e, "waiting", u64(j->elastic->waiting), &ok);
                put(e, "left", text(j->elastic->left), &ok);
                put(e, "joined", text(j->elastic->joined), &ok);
                put(o, "elastic", e, &ok);
        }
        /* only when the daemon was asked for it (job ID) */
        if (j->n_rank_status) {
                json_t *rs = json_array();
                for (size_t i = 0; rs && i < j->n_rank_status; i++)
                        push(rs, rank_status(j->rank_status[i]), &ok);
                put(o, "rank_status", rs, &ok);
        }
        return done(o, ok);
}

json_t *hvd_jobs_to_json(const Hvd__Status *s) {
        json_t *a = json_array();
        bool ok = a != NULL;
        for (size_t i = 0; a && i < s->n_jobs; i++)
                push(a, hvd_job_to_json(s->jobs[i]), &ok);
        return a ? done(a, ok) : NULL;
}

static json_t *peer(const Hvd__PeerStatus *p) {
        json_t *o = json_object();
        bool ok = o != NULL;
        if (!o)
                return NULL;
        put(o, "endpoint", text(p->endpoint), &ok);
        put(o, "state", text(p->state), &ok);
        put(o, "last_heard_usec", u64(p->last_heard_usec), &ok);
        put(o, "rtt_usec", u64(p->rtt_usec), &ok);
        put(o, "direction", text(p->direction), &ok);
        put(o, "host", text(p->host), &ok);
        put(o, "jobs", u64(p->jobs), &ok);
        return done(o, ok);
}

static json_t *offer(const Hvd__HostOffer *h) {
        json_t *o = json_object();
        bool ok = o != NULL;
        if (!o)
                return NULL;
        put(o, "host", text(h->host), &ok);
        put(o, "slots", u64(h->slots), &ok);
        put(o, "runtime_dir", text(h->runtime_dir), &ok);
        put(o, "machine", text(h->machine), &ok);
        put(o, "pid", u64(h->pid), &ok);
        put(o, "last_heard_usec", u64(h->age_usec), &ok);
        return done(o, ok);
}

json_t *hvd_status_to_json(const Hvd__Status *s) {
        json_t *o = json_object(), *peers = json_array(), *config = json_object(), *offers = json_array();
        bool ok = o && peers && config && offers;
        if (!ok) {
                json_decref(o);
                json_decref(peers);
                json_decref(config);
                json_decref(offers);
                return NULL;
        }
        put(o, "version", text(s->version), &ok);
        put(o, "uptime_usec", u64(s->uptime_usec), &ok);
        put(o, "pid", u64(s->pid), &ok);
        put(o, "runtime_dir", text(s->runtime_dir), &ok);
        put(o, "epoch", u64(s->epoch), &ok);
        put(o, "jobs", hvd_jobs_to_json(s), &ok);
        put(o, "fusion_threshold", u64(s->fusion_threshold), &ok);
        put(o, "cycle_time_usec", u64(s->cycle_time_usec), &ok);
        put(o, "host", text(s->host), &ok);
        put(o, "peer_endpoint", text(s->peer_endpoint), &ok);
        for (size_t i = 0; i < s->n_peers; i++)
                push(peers, peer(s->peers[i]), &ok);
        put(o, "peers", peers, &ok);
        for (size_t i = 0; i < s->n_config; i++) {
                /* a key is a C string: the object's key must be UTF-8 as well */
                json_t *k = text(s->config[i]->key);
                if (!k || json_object_set_new(config, json_string_value(k), text(s->config[i]->value)) < 0)
                        ok = false;
                json_decref(k);
        }
        put(o, "config", config, &ok);
        put(o, "log_level", text(s->log_level), &ok);
        put(o, "metrics_listen", text(s->metrics_listen), &ok);
        for (size_t i = 0; i < s->n_offers; i++)
                push(offers, offer(s->offers[i]), &ok);
        put(o, "offered_hosts", offers, &ok);
        return done(o, ok);
}

/* Writes JSON text, each negative integer (outside strings) as the
 * uint64_t whose two's complement it is; see the top of this file. */
static int write_unsigned(const char *t, FILE *f) {
        bool in_string = false;
        for (const char *p = t; *p;) {
                if (in_string) {
                        size_t n = strcspn(p, "\"\\");
                        fwrite(p, 1, n, f);
                        p += n;
                        if (*p == '\\' && p[1]) {
                                fwrite(p, 1, 2, f);
                                p += 2;
                        } else if (*p) {
                                fputc(*p++, f);
                                in_string = false;
                        }
                        continue;
                }
                if (*p == '"')
                        in_string = true;
                /* a whole number token: a real's exponent ("1e-05") is no integer */
                size_t n = (*p == '-' || (*p >= '0' && *p <= '9')) ? strspn(p, "-+.eE0123456789") : 0;
                if (n > 1 && *p == '-' && strspn(p + 1, "0123456789") == n - 1) {
                        errno = 0;
                        long long v = strtoll(p, NULL, 10);
                        if (errno)
                                return -EINVAL;
                        fprintf(f, "%" PRIu64, (uint64_t) v);
                        p += n;
                        continue;
                }
                if (n > 0) {
                        fwrite(p, 1, n, f);
                        p += n;
                        continue;
                }
                fputc(*p++, f);
        }
        return 0;
}

int hvd_json_write(const json_t *v, FILE *f) {
        char *t = json_dumps(v, JSON_INDENT(2));
        if (!t)
                return -ENOMEM;
        int r = write_unsigned(t, f);
        free(t);
        if (r == 0 && fputc('\n', f) == EOF)
                r = -EIO;
        return r < 0 ? r : ferror(f) ? -EIO : 0;
}
