/* io.c — the daemon's sockets and messages: socket options set once,
 * binding the local and peer sockets, every send (one path, which the
 * test tap sees), and taking one decoded, validated envelope off a socket
 * (or the fed one). Never blocks: sends are ZMQ_DONTWAIT. */
#include "config.h"

#include <grp.h>
#include <sys/stat.h>

#include "internal.h"

/* Where a send goes, for the tap. */
static hvd_daemon_source_t sock_kind(const hvd_daemon_t *d, const void *sock) {
        return sock == d->worker_sock    ? HVD_DAEMON_FROM_WORKER
               : sock == d->control_sock ? HVD_DAEMON_FROM_CONTROL
               : sock == d->peer_sock    ? HVD_DAEMON_FROM_PEER
                                         : HVD_DAEMON_FROM_ROOT;
}

/* Every send of the daemon ends here: the tap (tests) sees the bytes,
 * then they go to sock, to the peer id on a ROUTER (id NULL: a DEALER,
 * whose endpoint the tap is given). Sharing packed (zmq_msg_copy counts
 * references, nothing is copied). */
static int send_msg(hvd_daemon_t *d, void *sock, const void *id, size_t id_len, const char *endpoint,
                    zmq_msg_t *packed) {
        hvd_assert(id || endpoint);
        if (d->tap)
                d->tap(d->tap_userdata, sock_kind(d, sock), id ? id : endpoint, id ? id_len : strlen(endpoint),
                       zmq_msg_data(packed), zmq_msg_size(packed));
        zmq_msg_t m;
        int e = 0;
        zmq_msg_init(&m);
        if (zmq_msg_copy(&m, packed) < 0)
                e = -zmq_errno();
        else if (!id || (e = hvd_zmq_send(sock, id, id_len, ZMQ_SNDMORE | ZMQ_DONTWAIT)) == 0)
                e = hvd_zmq_msg_send(&m, sock, ZMQ_DONTWAIT);
        zmq_msg_close(&m);
        return e;
}

int io_pack(Hvd__Envelope *env, zmq_msg_t *packed) {
        env->version = HVD_PROTOCOL_VERSION;
        if (zmq_msg_init_size(packed, protobuf_c_message_get_packed_size(&env->base)) < 0)
                return -zmq_errno();
        protobuf_c_message_pack(&env->base, zmq_msg_data(packed));
        return 0;
}

static int send_env(hvd_daemon_t *d, void *sock, const void *id, size_t id_len, const char *endpoint,
                    Hvd__Envelope *env) {
        zmq_msg_t packed;
        int r = io_pack(env, &packed);
        if (r < 0)
                return r;
        r = send_msg(d, sock, id, id_len, endpoint, &packed);
        zmq_msg_close(&packed);
        return r;
}

int io_send(hvd_daemon_t *d, void *sock, const void *id, size_t id_len, Hvd__Envelope *env) {
        return send_env(d, sock, id, id_len, NULL, env);
}

int io_send_peer(hvd_daemon_t *d, const peer_t *p, Hvd__Envelope *env) {
        return send_env(d, p->sock, NULL, 0, p->endpoint, env);
}

int io_send_shared(hvd_daemon_t *d, void *sock, const void *id, size_t id_len, zmq_msg_t *packed) {
        return send_msg(d, sock, id, id_len, NULL, packed);
}

void io_error(hvd_daemon_t *d, void *sock, const void *id, size_t id_len, int code, const char *fmt, ...) {
        char msg[1024];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        Hvd__ErrorReply er = HVD__ERROR_REPLY__INIT;
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        er.code = code;
        er.message = msg;
        env.body_case = HVD__ENVELOPE__BODY_ERROR;
        env.error = &er;
        (void) io_send(d, sock, id, id_len, &env);
}

/* A send to w failed with r (quiet once it said goodbye or its job ended). */
void io_send_failed(const worker_t *w, int r) {
        hvd_log_full(w->goodbye || w->job->state == JOB_ABORTED ? LOG_DEBUG : LOG_WARNING, 0,
                     "job %s: cannot send to rank %u (pid %d): %s", w->job->id, w->rank, (int) w->pid, hvd_strerror(r));
}

void io_send_worker(hvd_daemon_t *d, worker_t *w, Hvd__Envelope *env) {
        if (w->exited)
                return;
        int r = io_send(d, d->worker_sock, w->id, w->id_len, env);
        if (r < 0)
                io_send_failed(w, r);
}

/* An envelope packed already, to w. */
void io_send_worker_bytes(hvd_daemon_t *d, const worker_t *w, const void *bytes, size_t len) {
        if (w->exited)
                return;
        zmq_msg_t packed;
        int r = zmq_msg_init_size(&packed, len) < 0 ? -zmq_errno() : 0;
        if (r == 0) {
                memcpy(zmq_msg_data(&packed), bytes, len);
                r = send_msg(d, d->worker_sock, w->id, w->id_len, NULL, &packed);
                zmq_msg_close(&packed);
        }
        if (r < 0)
                io_send_failed(w, r);
}

/* Root: to every remote node that joined; packed once, the same bytes to
 * each. A schedule goes to the hosts of a relay group through their relay
 * only (so that it comes after what the relay passed on before it). */
void io_send_nodes(hvd_daemon_t *d, job_t *j, Hvd__Envelope *env, bool schedule) {
        if (j->role != JOB_ROOT || !j->nodes)
                return;
        zmq_msg_t packed;
        int e = io_pack(env, &packed);
        if (e < 0) {
                hvd_log_warning("job %s: cannot send to its nodes: %s", j->id, hvd_strerror(e));
                return;
        }
        for (uint32_t c = 0; c < j->cross_size; c++) {
                node_t *n = &j->nodes[c];
                if (!n->joined || n->local || (schedule && j->relay_via && j->relay_via[c] && j->relay_via[c] != c))
                        continue;
                int r = io_send_shared(d, d->peer_sock, n->id, n->id_len, &packed);
                if (r < 0)
                        hvd_log_warning("job %s: cannot reach node %u (%s): %s", j->id, c, j->hosts ? j->hosts[c] : "?",
                                        hvd_strerror(r));
        }
        zmq_msg_close(&packed);
}

__thread fed_frame_t *fed;

static int fed_recv(uint8_t id[static 256], size_t *id_len, Hvd__Envelope **env, uid_t *uid, char *err, size_t err_len,
                    char *peer, size_t peer_len) {
        if (fed->taken)
                return 0;
        fed->taken = true;
        memcpy(id, fed->id, fed->id_len);
        *id_len = fed->id_len;
        if (peer) {
                if (fed->uid == (uid_t) -1)
                        snprintf(peer, peer_len, "%s", "");
                else
                        snprintf(peer, peer_len, "feed:%u:%u:%d", (unsigned) fed->uid, (unsigned) fed->uid,
                                 (int) getpid());
        }
        if (uid)
                *uid = fed->uid;
        int r = hvd_wire_decode(fed->data, fed->len, 0, env, err, err_len);
        return r < 0 ? r : 1;
}

/* One whole message from a DEALER (or the fed one). */
int io_recv_msg(zmq_msg_t *msg, void *sock) {
        if (!fed)
                return zmq_msg_recv(msg, sock, ZMQ_DONTWAIT);
        if (fed->taken || zmq_msg_init_size(msg, fed->len) < 0)
                return -1;
        fed->taken = true;
        if (fed->len)
                memcpy(zmq_msg_data(msg), fed->data, fed->len);
        return (int) fed->len;
}

/* Takes one message off a ROUTER socket without blocking: its routing id
 * and its decoded, validated envelope (owned by the caller). Extra frames
 * are dropped: one envelope per message. Returns 1 with *env set, 0 when
 * the socket is drained, or < 0 (the message was refused; err says why and
 * the id is filled, so the sender can be told). */
int io_recv(void *sock, uint8_t id[static 256], size_t *id_len, Hvd__Envelope **env, uid_t *uid, char *err,
            size_t err_len, char *peer, size_t peer_len) {
        if (fed)
                return fed_recv(id, id_len, env, uid, err, err_len, peer, peer_len);
        for (;;) {
                int n = zmq_recv(sock, id, 256, ZMQ_DONTWAIT);
                if (n < 0)
                        return 0; /* EAGAIN: drained */
                int more = 0;
                size_t ml = sizeof more;
                zmq_getsockopt(sock, ZMQ_RCVMORE, &more, &ml);
                if (!more || n > 256)
                        continue;
                zmq_msg_t msg;
                zmq_msg_init(&msg);
                if (zmq_msg_recv(&msg, sock, ZMQ_DONTWAIT) < 0) {
                        zmq_msg_close(&msg);
                        continue;
                }
                while (zmq_msg_more(&msg)) {
                        zmq_msg_t extra;
                        zmq_msg_init(&extra);
                        zmq_msg_recv(&extra, sock, ZMQ_DONTWAIT);
                        more = zmq_msg_more(&extra);
                        zmq_msg_close(&extra);
                        if (!more)
                                break;
                }
                *id_len = (size_t) n;
                if (peer) {
                        /* over ipc, libzmq reports the peer's SO_PEERCRED as "host:uid:gid:pid" */
                        const char *pa = zmq_msg_gets(&msg, "Peer-Address");
                        snprintf(peer, peer_len, "%s", pa ? pa : "");
                }
                if (uid && hvd_zap_msg_uid(&msg, uid) < 0)
                        *uid = (uid_t) -1;
                int r = hvd_wire_decode(zmq_msg_data(&msg), zmq_msg_size(&msg), 0, env, err, err_len);
                zmq_msg_close(&msg);
                return r < 0 ? r : 1;
        }
}

void io_count(hvd_daemon_t *d, int sock, int r, const Hvd__Envelope *env) {
        if (r < 0)
                d->metrics.rejected[sock]++;
        else if ((unsigned) env->body_case < HVD_METRICS_MAX_BODY)
                d->metrics.messages[env->body_case]++;
}

void *io_socket(hvd_daemon_t *d, int type, bool peer) {
        void *s = zmq_socket(d->zctx, type);
        if (!s)
                return NULL;
        int one = 1, zero = 0, hwm = 100000, handshake = HANDSHAKE_MSEC, ivl = 1000, connect = CONNECT_MSEC;
        int tmo = (int) (d->cfg.peer_timeout_usec / 1000);
        int64_t maxmsg = (int64_t) d->cfg.max_message_bytes;
        zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
        zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg);
        zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof hwm);
        zmq_setsockopt(s, ZMQ_RCVHWM, &hwm, sizeof hwm);
        if (type == ZMQ_ROUTER) {
                zmq_setsockopt(s, ZMQ_HANDSHAKE_IVL, &handshake, sizeof handshake);
                zmq_setsockopt(s, ZMQ_ROUTER_MANDATORY, &one, sizeof one);
        }
        if (peer) {
                zmq_setsockopt(s, ZMQ_HEARTBEAT_IVL, &ivl, sizeof ivl);
                zmq_setsockopt(s, ZMQ_HEARTBEAT_TIMEOUT, &tmo, sizeof tmo);
                /* a connect() pending longer is abandoned and made again:
                 * after a lossy spell the kernel's SYN retries back off to
                 * 8-16 s apart, which would outlast a job's start timeout */
                zmq_setsockopt(s, ZMQ_CONNECT_TIMEOUT, &connect, sizeof connect);
        }
        return s;
}

int io_bind_local(hvd_daemon_t *d, void **sock, char *ep, size_t ep_len, const char *name) {
        snprintf(ep, ep_len, "ipc://%s/%s", d->cfg.runtime_dir, name);
        *sock = io_socket(d, ZMQ_ROUTER, false);
        if (!*sock)
                return hvd_log_error(-zmq_errno(), "Cannot create socket");
        int r = hvd_zap_setup_local(d->zap, *sock);
        if (r < 0)
                return r;
        if ((r = hvd_zmq_bind(*sock, ep)) < 0)
                return hvd_log_error(r, "Cannot bind %s", ep);
        const char *path = ep + 6;
        if (chmod(path, d->cfg.socket_mode) < 0)
                return hvd_log_error(-errno, "Cannot chmod %s", path);
        if (d->cfg.socket_group[0]) {
                struct group *g = getgrnam(d->cfg.socket_group);
                if (!g)
                        return hvd_log_error(-ENOENT, "Socket group '%s' does not exist", d->cfg.socket_group);
                if (chown(path, (uid_t) -1, g->gr_gid) < 0)
                        return hvd_log_error(-errno, "Cannot give %s to group %s", path, d->cfg.socket_group);
        }
        return 0;
}

int io_bind_peer(hvd_daemon_t *d) {
        d->peer_sock = io_socket(d, ZMQ_ROUTER, true);
        if (!d->peer_sock)
                return -zmq_errno();
        int r = hvd_zap_setup_peer_server(d->zap, d->peer_sock);
        if (r < 0)
                return r;
        if ((r = hvd_zmq_bind(d->peer_sock, d->cfg.peer_listen)) < 0)
                return hvd_log_error(r, "Cannot bind the peer socket %s", d->cfg.peer_listen);
        size_t len = sizeof d->peer_ep;
        if (zmq_getsockopt(d->peer_sock, ZMQ_LAST_ENDPOINT, d->peer_ep, &len) < 0)
                snprintf(d->peer_ep, sizeof d->peer_ep, "%s", d->cfg.peer_listen);
        /* for launchers: which endpoint this daemon's peers use, written
         * whole, then renamed: a reader never sees half a line */
        char path[PATH_MAX + 32], tmp[PATH_MAX + 40];
        snprintf(path, sizeof path, "%s/peer.endpoint", d->cfg.runtime_dir);
        snprintf(tmp, sizeof tmp, "%s.tmp", path);
        FILE *f = fopen(tmp, "we");
        if (!f || fprintf(f, "%s\n", d->peer_ep) < 0 || fclose(f) != 0 || rename(tmp, path) < 0)
                hvd_log_warning("cannot write %s: %m", path);
        return 0;
}

void io_refuse_peer(hvd_daemon_t *d, const void *id, size_t id_len, const char *job_id, int code, const char *fmt,
                    ...) {
        char reason[1024];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(reason, sizeof reason, fmt, ap);
        va_end(ap);
        Hvd__Abort ab = HVD__ABORT__INIT;
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        ab.job_id = (char *) job_id;
        ab.reason = reason;
        ab.code = code;
        ab.lost_rank = -1;
        env.body_case = HVD__ENVELOPE__BODY_ABORT;
        env.abort = &ab;
        (void) io_send(d, d->peer_sock, id, id_len, &env);
}
