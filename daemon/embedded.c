/* embedded.c — a daemon in a thread (embedded.h), and the probes of a
 * daemon by its runtime directory that hvdrun and libhvd share. A probe
 * checks the socket files' permission first: libzmq retries a refused
 * ipc connect silently, which would read as a daemon that hangs. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "embedded.h"
#include "hvd.h"
#include "thread.h"
#include "util.h"
#include "wire.h"

static void *embedded_main(void *arg) {
        hvd_embedded_t *e = arg;
        e->run_result = hvd_daemon_run(e->daemon);
        return NULL;
}

int hvd_embedded_start(hvd_embedded_t *e, const hvd_daemon_config_t *cfg, char *msg, size_t msg_len) {
        *e = (hvd_embedded_t){ 0 };
        int r = hvd_daemon_new(cfg, &e->daemon);
        if (r < 0) {
                snprintf(msg, msg_len, "cannot start a private hvd-coordinatord in %s%s%s: %s", cfg->runtime_dir,
                         cfg->peer_listen[0] ? " with peers on " : "", cfg->peer_listen, hvd_strerror(r));
                return r;
        }
        r = hvd_thread_start(&e->thread, embedded_main, e);
        if (r < 0) {
                snprintf(msg, msg_len, "cannot start the coordinator thread: %s", strerror(-r));
                hvd_daemon_destroy(&e->daemon);
                return r;
        }
        e->thread_started = true;
        return 0;
}

void hvd_embedded_ask_stop(hvd_embedded_t *e) {
        if (e && e->daemon && e->thread_started)
                hvd_daemon_stop(e->daemon);
}

int hvd_embedded_stop(hvd_embedded_t *e) {
        if (!e)
                return 0;
        int r = 0;
        if (e->daemon && e->thread_started) {
                hvd_daemon_stop(e->daemon);
                pthread_join(e->thread, NULL);
                e->thread_started = false;
                r = e->run_result;
        }
        hvd_daemon_destroy(&e->daemon);
        return r;
}

int hvd_daemon_peer_endpoint(const char *dir, char *buf, size_t len) {
        char path[PATH_MAX + 32], line[512] = "";
        snprintf(path, sizeof path, "%s/peer.endpoint", dir);
        FILE *f = fopen(path, "re");
        if (!f)
                return -errno;
        bool ok = fgets(line, sizeof line, f) != NULL;
        fclose(f);
        line[strcspn(line, "\r\n")] = 0;
        if (!ok || !line[0] || strlen(line) >= len)
                return -ENODATA;
        memcpy(buf, line, strlen(line) + 1);
        return 0;
}

/* The control and worker sockets of dir exist and may be used. */
static int probe_files(const char *dir, char *msg, size_t msg_len) {
        char path[PATH_MAX + 32], wpath[PATH_MAX + 32];
        snprintf(path, sizeof path, "%s/control.sock", dir);
        snprintf(wpath, sizeof wpath, "%s/worker.sock", dir);
        if (access(path, F_OK) < 0 && errno == ENOENT) {
                snprintf(msg, msg_len, "no hvd-coordinatord is running at %s (no control socket)", dir);
                return -ECONNREFUSED;
        }
        if (access(path, R_OK | W_OK) < 0 || access(wpath, R_OK | W_OK) < 0) {
                int e = errno;
                if (e == EACCES || e == EPERM)
                        snprintf(msg, msg_len,
                                 "the hvd-coordinatord at %s cannot be used: permission denied (are you in group "
                                 "hvd?)",
                                 dir);
                else
                        snprintf(msg, msg_len, "the hvd-coordinatord at %s cannot be used: %s", dir, strerror(e));
                return -e;
        }
        return 0;
}

/* A status request to dir's control socket; *reply owned by the caller. */
static int status_call(const char *dir, uint64_t timeout_usec, Hvd__Envelope **reply) {
        char ep[PATH_MAX + 48];
        snprintf(ep, sizeof ep, "ipc://%s/control.sock", dir);
        Hvd__StatusRequest q = HVD__STATUS_REQUEST__INIT;
        Hvd__Envelope req = HVD__ENVELOPE__INIT;
        req.body_case = HVD__ENVELOPE__BODY_STATUS_REQUEST;
        req.status_request = &q;
        return hvd_control_call(NULL, ep, &req, timeout_usec, reply);
}

int hvd_daemon_probe(const char *dir, uint64_t timeout_usec, char *msg, size_t msg_len, char *version,
                     size_t version_len, uint32_t *pid) {
        int r = probe_files(dir, msg, msg_len);
        if (r < 0)
                return r;
        Hvd__Envelope *reply = NULL;
        r = status_call(dir, timeout_usec, &reply);
        if (r < 0) {
                if (r == HVD_ETIMEOUT)
                        snprintf(msg, msg_len, "the hvd-coordinatord at %s does not answer within %.0f s", dir,
                                 (double) timeout_usec / 1e6);
                else if (r == -ECONNREFUSED)
                        snprintf(msg, msg_len, "no hvd-coordinatord is running at %s (no control socket)", dir);
                else
                        snprintf(msg, msg_len, "cannot reach the hvd-coordinatord at %s: %s", dir, hvd_strerror(r));
                return r;
        }
        if (reply->body_case != HVD__ENVELOPE__BODY_STATUS) {
                snprintf(msg, msg_len, "the hvd-coordinatord at %s refused a status request: %s", dir,
                         reply->body_case == HVD__ENVELOPE__BODY_ERROR ? reply->error->message : "unexpected reply");
                hvd_wire_free(&reply);
                return HVD_EPROTO;
        }
        if (version)
                snprintf(version, version_len, "%s", reply->status->version);
        if (pid)
                *pid = reply->status->pid;
        hvd_wire_free(&reply);
        return 0;
}

/* A rank of the job still in it: not gone, not said goodbye, not skip_pid. */
static bool rank_stays(const Hvd__RankStatus *rs, uint32_t skip_pid) {
        return rs->local && rs->pid != skip_pid && strcmp(rs->state, "departed") != 0 &&
               strcmp(rs->state, "exited") != 0;
}

int hvd_daemon_job_ranks_left(const char *dir, const char *job_id, uint32_t skip_pid, uint64_t timeout_usec) {
        char ep[PATH_MAX + 48];
        snprintf(ep, sizeof ep, "ipc://%s/control.sock", dir);
        Hvd__StatusRequest q = HVD__STATUS_REQUEST__INIT;
        Hvd__Envelope req = HVD__ENVELOPE__INIT, *reply = NULL;
        q.job_id = (char *) job_id;
        q.rank_detail = true;
        req.body_case = HVD__ENVELOPE__BODY_STATUS_REQUEST;
        req.status_request = &q;
        int r = hvd_control_call(NULL, ep, &req, timeout_usec, &reply);
        if (r < 0)
                return r;
        if (reply->body_case != HVD__ENVELOPE__BODY_STATUS) {
                hvd_wire_free(&reply);
                return 0; /* an error reply: no such job any more */
        }
        int left = 0;
        for (size_t i = 0; i < reply->status->n_jobs; i++) {
                const Hvd__JobStatus *js = reply->status->jobs[i];
                for (size_t k = 0; strcmp(js->job_id, job_id) == 0 && k < js->n_rank_status; k++)
                        left += rank_stays(js->rank_status[k], skip_pid);
        }
        hvd_wire_free(&reply);
        return left;
}

int hvd_machine_id(char *buf, size_t len) {
        static const char *const files[] = { "/etc/machine-id", "/proc/sys/kernel/random/boot_id" };
        for (size_t i = 0; i < ELEMENTSOF(files); i++) {
                int fd = open(files[i], O_RDONLY | O_CLOEXEC);
                if (fd < 0)
                        continue;
                char b[128];
                ssize_t n = read(fd, b, sizeof b - 1);
                close(fd);
                if (n <= 0)
                        continue;
                b[n] = 0;
                b[strcspn(b, "\n")] = 0;
                if (!b[0] || strlen(b) >= len || strlen(b) > 64)
                        continue;
                snprintf(buf, len, "%s", b);
                return 0;
        }
        return -ENOENT;
}

int hvd_daemon_offers(const char *dir, uint64_t timeout_usec, hvd_daemon_offer_t *out, size_t max, size_t *n, char *msg,
                      size_t msg_len) {
        Hvd__Envelope *reply = NULL;
        int r = status_call(dir, timeout_usec, &reply);
        if (r < 0) {
                snprintf(msg, msg_len, "the hvd-coordinatord at %s does not answer: %s", dir, hvd_strerror(r));
                return r;
        }
        if (reply->body_case != HVD__ENVELOPE__BODY_STATUS) {
                snprintf(msg, msg_len, "the hvd-coordinatord at %s refused a status request", dir);
                hvd_wire_free(&reply);
                return HVD_EPROTO;
        }
        char me[65] = "", err[256];
        (void) hvd_machine_id(me, sizeof me);
        size_t k = 0;
        r = 0;
        for (size_t i = 0; i < reply->status->n_offers && r == 0; i++) {
                const Hvd__HostOffer *o = reply->status->offers[i];
                if (hvd_wire_validate_name(o->host, sizeof out->host - 1, "host name", err, sizeof err) < 0 ||
                    hvd_wire_validate_name(o->runtime_dir, sizeof out->runtime_dir - 32, "runtime directory", err,
                                           sizeof err) < 0 ||
                    !o->host[0] || !o->runtime_dir[0] || o->slots > HVD_WIRE_MAX_OFFER_SLOTS) {
                        snprintf(msg, msg_len, "the hvd-coordinatord at %s lists a bad host offer: %s", dir,
                                 o->host[0] && o->runtime_dir[0] ? err : "empty host or directory");
                        r = HVD_EPROTO;
                } else if (k == max) {
                        snprintf(msg, msg_len, "the hvd-coordinatord at %s lists more than %zu host offers", dir, max);
                        r = -E2BIG;
                } else {
                        hvd_daemon_offer_t *d = &out[k++];
                        snprintf(d->host, sizeof d->host, "%s", o->host);
                        snprintf(d->runtime_dir, sizeof d->runtime_dir, "%s", o->runtime_dir);
                        d->slots = o->slots;
                        d->pid = o->pid;
                        d->here = me[0] && strcmp(me, o->machine) == 0;
                }
        }
        hvd_wire_free(&reply);
        if (r == 0)
                *n = k;
        return r;
}
