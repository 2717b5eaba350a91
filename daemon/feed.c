/* feed.c — the daemon without sockets, for tests and fuzzing: a message
 * handed in is read by the same receive paths as one off the wire, the
 * clock can be moved, a worker's exit declared, and a tap sees every
 * message sent. Reactor thread only, like the rest. */
#include "config.h"

#include "internal.h"

int hvd_daemon_feed(hvd_daemon_t *d, hvd_daemon_source_t src, const void *id, size_t id_len, uid_t uid,
                    const void *data, size_t len) {
        peer_t *p = NULL;
        if (!d || (id_len && !id) || id_len > 255 || (len && !data))
                return -EINVAL;
        if (src == HVD_DAEMON_FROM_PEER && !d->peer_sock)
                return -ENOENT;
        if (src == HVD_DAEMON_FROM_ROOT) {
                char ep[HVD_WIRE_MAX_TEXT + 1];
                snprintf(ep, sizeof ep, "%.*s", (int) id_len, (const char *) id);
                p = hvd_strmap_get(d->peers, ep, strlen(ep));
                if (!p || !p->sock)
                        return -ENOENT;
        }
        fed_frame_t f = { .id = id, .id_len = id_len, .data = data, .len = len, .uid = uid };
        fed = &f;
        switch (src) {
        case HVD_DAEMON_FROM_WORKER: worker_handle_socket(d); break;
        case HVD_DAEMON_FROM_CONTROL: control_handle_socket(d); break;
        case HVD_DAEMON_FROM_PEER: root_handle_socket(d); break;
        case HVD_DAEMON_FROM_ROOT: uplink_handle_socket(d, p); break;
        default: fed = NULL; return -EINVAL;
        }
        fed = NULL;
        if (!d->feed_one_turn)
                loop_before_sleep(d);
        return 0;
}

void hvd_daemon_feed_turn(hvd_daemon_t *d, bool begin) {
        d->feed_one_turn = begin;
        if (!begin)
                loop_before_sleep(d);
}

int hvd_daemon_feed_exit(hvd_daemon_t *d, const void *id, size_t id_len) {
        worker_t *w = hvd_strmap_get(d->workers, id, id_len);
        if (!w)
                return -ENOENT;
        worker_gone(d, w, "exited");
        loop_before_sleep(d);
        return 0;
}

void hvd_daemon_feed_time(hvd_daemon_t *d, uint64_t advance_usec) {
        loop_housekeeping(d, hvd_now_usec() + advance_usec);
        loop_before_sleep(d);
}

void hvd_daemon_set_tap(hvd_daemon_t *d, hvd_daemon_tap_fn fn, void *userdata) {
        d->tap = fn;
        d->tap_userdata = userdata;
}
