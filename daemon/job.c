/* job.c — a job as this daemon holds it: creation from its first hello
 * or host join, its rank table, abort (everyone who must know is told,
 * once), removal, and the tombs of jobs aborted while ranks were still
 * joining, so that a late rank learns why. */
#include "config.h"

#include <sys/file.h>
#include <sys/mman.h>

#include "internal.h"

const char *job_host(const job_t *j, uint32_t cross_rank) {
        return j->hosts && cross_rank < j->cross_size ? j->hosts[cross_rank] : "?";
}

/* The ranks of host cross_rank as "0, 1, 2" (known once the job runs). */
void job_host_ranks(const job_t *j, uint32_t cross_rank, char *buf, size_t len) {
        size_t o = 0;
        buf[0] = 0;
        for (uint32_t r = 0; j->table && r < j->size && o + 12 < len; r++)
                if (j->table[r].known && j->table[r].cross_rank == cross_rank)
                        o += (size_t) snprintf(buf + o, len - o, "%s%u", o ? ", " : "", r);
}

/* Aborts the job here and tells everyone who has to know: the local
 * workers, and the other daemons (root: every node; otherwise: the root,
 * unless the abort came from it). */
static void job_abort_v(hvd_daemon_t *d, job_t *j, bool from_root, int lost_rank, int code, int level, const char *fmt,
                        va_list ap) __attribute__((format(printf, 7, 0)));
static void job_abort_v(hvd_daemon_t *d, job_t *j, bool from_root, int lost_rank, int code, int level, const char *fmt,
                        va_list ap) {
        elastic_job_aborted(d, j, lost_rank); /* a later lost rank counts too */
        if (j->state == JOB_ABORTED)
                return;
        vsnprintf(j->abort_reason, sizeof j->abort_reason, fmt, ap);
        j->state = JOB_ABORTED;
        j->aborted_usec = hvd_now_usec();
        d->metrics.jobs_aborted++;
        hvd_log_full(level, 0, "job %s %s: %s", j->id, level == LOG_ERR ? "aborted" : "ended", j->abort_reason);
        Hvd__Abort ab = HVD__ABORT__INIT;
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        ab.job_id = j->id;
        ab.reason = j->abort_reason;
        ab.lost_rank = lost_rank;
        ab.code = code;
        env.body_case = HVD__ENVELOPE__BODY_ABORT;
        env.abort = &ab;
        worker_send_all(d, j, &env, false);
        if (j->role == JOB_ROOT)
                io_send_nodes(d, j, &env, false);
        else if (!from_root)
                uplink_send_root(d, j, &env);
        d->next_housekeeping = 0;
}

void job_abort_ex(hvd_daemon_t *d, job_t *j, bool from_root, int lost_rank, int code, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        job_abort_v(d, j, from_root, lost_rank, code, LOG_ERR, fmt, ap);
        va_end(ap);
}

/* The end of a job that is shutting down anyway (a local rank said
 * goodbye): the ranks still in it are told, the log says it as news. */
void job_end_quietly(hvd_daemon_t *d, job_t *j, bool from_root, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        job_abort_v(d, j, from_root, -1, HVD_EABORTED, LOG_NOTICE, fmt, ap);
        va_end(ap);
}

void job_free(hvd_daemon_t *d, job_t *j) {
        if (!j)
                return;
        free(j->board_sent);
        /* a job half made by job_create may lack its rank array */
        for (uint32_t r = 0; j->ranks && r < j->size; r++)
                worker_free(d, j->ranks[r]);
        free(j->ranks);
        hvd_negotiator_destroy(&j->neg);
        elastic_keep_tune(d, j);
        autotune_free(&j->tune);
        /* the workers unlink the segment once all are attached; this catches a
         * job that died before that */
        if (j->shm_name[0])
                shm_unlink(j->shm_name);
        if (j->hosts)
                for (uint32_t c = 0; c < j->cross_size; c++)
                        free(j->hosts[c]);
        free(j->hosts);
        free(j->table);
        batch_free(&j->batch);
        free(j->rstat);
        free(j->node_first);
        free(j->node_list);
        for (size_t k = 0; k <= HVD_WIRE_SCHEDULE_KEYS; k++) {
                free(j->key_body[k]);
                free(j->key_ids[k]);
        }
        if (j->root)
                j->root->n_jobs--;
        if (j->relay)
                j->relay->n_jobs--;
        relay_free(j->rl);
        for (size_t i = 0; i < j->n_early; i++)
                protobuf_c_message_free_unpacked(&j->early[i].nr->base, NULL);
        free(j->early);
        free(j->relay_via);
        for (uint32_t c = 0; j->nodes && c < j->cross_size; c++)
                free(j->nodes[c].endpoint);
        free(j->nodes);
        free(j);
}

void job_set_nccl_id(job_t *j, const ProtobufCBinaryData *id) {
        if (id->len && id->len <= sizeof j->nccl_id && !j->nccl_id_len) {
                memcpy_safe(j->nccl_id, id->data, id->len);
                j->nccl_id_len = id->len;
        }
}

static void tomb_add(hvd_daemon_t *d, const job_t *j) {
        tomb_t *t = &d->tombs[d->next_tomb++ % N_TOMBS];
        free(t->joined);
        memset(t, 0, sizeof *t);
        if (!(t->joined = calloc(j->size, 1)))
                return;
        snprintf(t->id, sizeof t->id, "%s", j->id);
        memcpy_safe(t->secret, j->secret, j->secret_len);
        t->secret_len = j->secret_len;
        t->usec = hvd_now_usec();
        t->size = j->size;
        for (uint32_t r = 0; r < j->size; r++)
                t->joined[r] = j->ranks[r] != NULL;
        snprintf(t->reason, sizeof t->reason, "%s", j->abort_reason);
}

/* A job recently aborted before this rank of it joined, or NULL. */
const tomb_t *job_tomb_find(const hvd_daemon_t *d, const Hvd__Hello *h) {
        uint64_t now = hvd_now_usec();
        for (size_t i = 0; i < N_TOMBS; i++) {
                const tomb_t *t = &d->tombs[i];
                if (t->joined && now - t->usec < ABORTED_JOB_LINGER_USEC && strcmp(t->id, h->job_id) == 0 &&
                    h->rank < t->size && !t->joined[h->rank] &&
                    memeq_safe(t->secret, t->secret_len, h->secret.data, h->secret.len))
                        return t;
        }
        return NULL;
}

void job_remove(hvd_daemon_t *d, job_t *j) {
        hvd_log_info("job %s removed (%s)", j->id, job_state_names[j->state]);
        if (j->rl)
                relay_log_totals(j);
        if (j->state == JOB_ABORTED && j->n_hello < j->local_size)
                tomb_add(d, j);
        if (j->state != JOB_ABORTED)
                d->metrics.jobs_finished++;
        hvd_strmap_remove(d->jobs, j->id, strlen(j->id));
        job_free(d, j);
}

int job_rank_infos(const job_t *j, bool local, rank_infos_t *out) {
        /* a root job started by a remote host does not know its local size yet */
        size_t cap = local ? HVD_MIN(j->local_size, j->size) : j->size;
        rank_infos_t ri = { .infos = calloc(cap ? cap : 1, sizeof *ri.infos),
                            .ptrs = calloc(cap ? cap : 1, sizeof *ri.ptrs) };
        if (!ri.infos || !ri.ptrs) {
                rank_infos_free(&ri);
                return -ENOMEM;
        }
        for (uint32_t r = 0; r < j->size && ri.n < cap; r++) {
                const worker_t *w = j->ranks[r];
                const rinfo_t *t = &j->table[r];
                if (local && !w)
                        continue;
                Hvd__RankInfo *i = &ri.infos[ri.n];
                hvd__rank_info__init(i);
                i->rank = r;
                i->local_rank = local ? w->local_rank : t->local_rank;
                i->pid = local ? (uint32_t) w->pid : t->pid;
                i->host = (char *) (local ? w->host : t->host);
                i->data_addr = (char *) (local ? w->data_addr : t->data_addr);
                i->cross_rank = local ? j->cross_rank : t->cross_rank;
                ri.ptrs[ri.n++] = i;
        }
        *out = ri;
        return 0;
}

void rank_infos_free(rank_infos_t *ri) {
        free(ri->infos);
        free(ri->ptrs);
        *ri = (rank_infos_t){ 0 };
}

int job_table_add(job_t *j, int64_t cross_rank, Hvd__RankInfo *const *ri, size_t n, char *err, size_t len) {
        for (size_t i = 0; i < n; i++) {
                uint32_t r = ri[i]->rank, c = cross_rank >= 0 ? (uint32_t) cross_rank : ri[i]->cross_rank;
                if (r >= j->size || j->table[r].known) {
                        snprintf(err, len, "rank %u is claimed twice (hosts %s and %s)", r,
                                 r < j->size ? job_host(j, j->table[r].cross_rank) : "?", job_host(j, c));
                        while (i-- > 0) /* the table stays as it was */
                                j->table[ri[i]->rank].known = false;
                        return HVD_EDUPLICATE;
                }
                /* a rank twice in this very list shows on its second entry */
                j->table[r].known = true;
        }
        for (size_t i = 0; i < n; i++) {
                rinfo_t *t = &j->table[ri[i]->rank];
                t->known = true;
                t->local_rank = ri[i]->local_rank;
                t->pid = ri[i]->pid;
                t->cross_rank = cross_rank >= 0 ? (uint32_t) cross_rank : ri[i]->cross_rank;
                snprintf(t->host, sizeof t->host, "%s", ri[i]->host);
                snprintf(t->data_addr, sizeof t->data_addr, "%s", ri[i]->data_addr);
        }
        return 0;
}

static void observe_negotiation(void *userdata, uint64_t wait_usec) {
        hvd_daemon_t *d = userdata;
        hvd_histogram_observe(&d->metrics.negotiation, wait_usec);
}

job_t *job_create(hvd_daemon_t *d, const job_params_t *jp, char *err, size_t len) {
        if (hvd_strmap_size(d->jobs) >= d->cfg.max_jobs) {
                snprintf(err, len, "job %s refused: this daemon already serves max_jobs (%u) jobs", jp->job_id,
                         d->cfg.max_jobs);
                return NULL;
        }
        uint32_t cross_size = jp->cross_size ? jp->cross_size : 1;
        bool root = cross_size > 1 && jp->cross_rank == 0;
        if (cross_size > 1 && root && !d->peer_sock) {
                snprintf(err, len,
                         "job %s spans %u hosts and this daemon is its root, but it has no peer_listen "
                         "address configured for the other daemons to reach it",
                         jp->job_id, cross_size);
                return NULL;
        }
        if (cross_size > 1 && !root && (!jp->root_peer || !jp->root_peer[0])) {
                snprintf(err, len, "job %s spans %u hosts but names no root daemon endpoint (HVD_ROOT_PEER)",
                         jp->job_id, cross_size);
                return NULL;
        }
        job_t *j = calloc(1, sizeof *j);
        if (!j) {
                snprintf(err, len, "out of memory");
                return NULL;
        }
        snprintf(j->id, sizeof j->id, "%s", jp->job_id);
        snprintf(j->launcher, sizeof j->launcher, "%s", jp->launcher ? jp->launcher : "");
        memcpy_safe(j->secret, jp->secret, jp->secret_len);
        j->secret_len = jp->secret_len;
        j->size = jp->world_size;
        j->local_size = jp->local_size;
        j->cross_rank = cross_size > 1 ? jp->cross_rank : 0;
        j->cross_size = cross_size;
        j->role = cross_size == 1 ? JOB_SINGLE : root ? JOB_ROOT : JOB_MEMBER;
        j->state = JOB_JOINING;
        j->created_usec = hvd_now_usec();
        j->departed_rank = -1;
        j->fusion_threshold =
                jp->fusion_threshold >= 0 ? (uint64_t) jp->fusion_threshold : d->cfg.fusion_threshold_bytes;
        j->cycle_time_usec = jp->cycle_time_usec ? jp->cycle_time_usec : d->cfg.cycle_time_usec;
        j->stall_check_usec = jp->stall_check_usec;
        j->stall_shutdown_usec = jp->stall_shutdown_usec;
        j->ring_checksum = d->cfg.ring_checksum;
        unsigned rnd = 0;
        int ufd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
        if (ufd >= 0) {
                if (read(ufd, &rnd, sizeof rnd) < 0)
                        rnd = 0;
                close(ufd);
        }
        snprintf(j->shm_name, sizeof j->shm_name, "/hvd-%d-%" PRIu64 "-%08x", (int) getpid(), ++d->job_seq, rnd);
        j->ranks = calloc(j->size, sizeof *j->ranks);
        j->table = calloc(j->size, sizeof *j->table);
        j->hosts = calloc(cross_size, sizeof *j->hosts);
        j->rstat = calloc(j->size, sizeof *j->rstat);
        bool ok = j->ranks && j->table && j->hosts && j->rstat;
        for (uint32_t c = 0; c < cross_size && ok; c++) {
                char fallback[32];
                snprintf(fallback, sizeof fallback, "host%u", c);
                ok = (j->hosts[c] = strdup(c < jp->n_hosts ? jp->hosts[c] : fallback)) != NULL;
        }
        if (ok && (cross_size == 1 || root))
                ok = hvd_negotiator_new(j->size, d->cfg.max_tensors_per_job, j->fusion_threshold, &j->neg) >= 0;
        if (ok && root)
                ok = (j->nodes = calloc(cross_size, sizeof *j->nodes)) != NULL;
        if (ok && cross_size > 1 && !root) {
                j->root = uplink_peer(d, jp->root_peer);
                ok = j->root != NULL;
                if (j->root)
                        j->root->n_jobs++;
        }
        if (!ok || hvd_strmap_put(d->jobs, j->id, strlen(j->id), j) < 0) {
                j->shm_name[0] = 0;
                job_free(d, j);
                snprintf(err, len,
                         "job %s: cannot set up (out of memory, root daemon endpoint '%s' invalid, or no CURVE key "
                         "for it: see the daemon's log)",
                         jp->job_id, jp->root_peer ? jp->root_peer : "");
                return NULL;
        }
        if (job_negotiates(j))
                hvd_negotiator_set_observer(j->neg, observe_negotiation, d);
        d->metrics.jobs_started++;
        d->next_housekeeping = 0;
        hvd_log_info("job %s created: %u ranks, %u here, host %u of %u%s", j->id, j->size, j->local_size, j->cross_rank,
                     cross_size, root ? " (root)" : "");
        return j;
}

bool job_secret_is(const job_t *j, const void *secret, size_t len) {
        return memeq_safe(j->secret, j->secret_len, secret, len);
}
