/* service.c — the daemon as a systemd service: sd_notify (READY, STATUS,
 * WATCHDOG, RELOADING, STOPPING; spoken directly without libsystemd),
 * the watchdog interval, SIGHUP's reload of what can change live, and
 * the signals that stop it. */
#include "config.h"

#include <signal.h>
#include <sys/signalfd.h>
#ifdef HAVE_LIBSYSTEMD
#include <systemd/sd-daemon.h>
#endif

#include "internal.h"

static void log_change(const char *key, bool live, const hvd_daemon_config_t *cur, const hvd_daemon_config_t *next,
                       void *userdata) {
        char was[PATH_MAX], now[PATH_MAX];
        size_t *applied = userdata;
        (void) hvd_daemon_config_format(cur, key, was, sizeof was);
        (void) hvd_daemon_config_format(next, key, now, sizeof now);
        if (live) {
                hvd_log_notice("reload: %s = %s (was %s)", key, now, was);
                (*applied)++;
        } else
                hvd_log_warning("reload: %s changed (%s -> %s) but cannot change while running; "
                                "it keeps %s until the daemon restarts",
                                key, was, now, was);
}

int hvd_daemon_reload(hvd_daemon_t *d, const hvd_daemon_config_t *cfg) {
        size_t applied = 0;
        /* the new level first, so that its own lines follow it */
        if (cfg->log_level > hvd_log_max_level)
                hvd_log_max_level = cfg->log_level;
        size_t changed = hvd_daemon_config_apply_live(&d->cfg, cfg, log_change, &applied);
        hvd_log_max_level = d->cfg.log_level;
        hvd_log_notice("reload: %zu setting%s changed, %zu applied", changed, changed == 1 ? "" : "s", applied);
        /* timeouts may now be due sooner */
        d->next_housekeeping = hvd_now_usec();
        return (int) applied;
}

void hvd_daemon_set_reload(hvd_daemon_t *d, hvd_daemon_load_fn load, void *userdata) {
        d->reload_fn = load;
        d->reload_userdata = userdata;
}

static void reload(hvd_daemon_t *d) {
        if (!d->reload_fn) {
                hvd_log_notice("SIGHUP: no configuration to reload");
                return;
        }
        if (d->cfg.notify)
                service_notify("RELOADING=1\nSTATUS=Reloading the configuration");
        hvd_daemon_config_t next;
        char msg[1024] = "";
        int r = d->reload_fn(&next, msg, sizeof msg, d->reload_userdata);
        if (r < 0)
                hvd_log_error(0, "reload failed, the settings in force are unchanged: %s", msg);
        else
                (void) hvd_daemon_reload(d, &next);
        d->status_jobs = d->status_workers = SIZE_MAX; /* STATUS= again */
        if (d->cfg.notify)
                service_notify("READY=1");
}

void service_handle_signal(hvd_daemon_t *d) {
        struct signalfd_siginfo si;
        if (read(d->sig_fd, &si, sizeof si) != sizeof si)
                return;
        if (si.ssi_signo == SIGHUP) {
                hvd_log_notice("SIGHUP: reloading the configuration");
                reload(d);
                return;
        }
        hvd_log_notice("received signal %u (%s), stopping", si.ssi_signo, strsignal((int) si.ssi_signo));
        d->stopping = true;
}

void service_notify(const char *state) {
#ifdef HAVE_LIBSYSTEMD
        (void) sd_notify(0, state);
#else
        const char *path = getenv("NOTIFY_SOCKET");
        if (!path || !*path)
                return;
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        size_t len = strlen(path);
        if (len >= sizeof sa.sun_path)
                return;
        memcpy(sa.sun_path, path, len);
        if (sa.sun_path[0] == '@')
                sa.sun_path[0] = 0;
        int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return;
        (void) sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *) &sa,
                      (socklen_t) (offsetof(struct sockaddr_un, sun_path) + len));
        close(fd);
#endif
}

/* WATCHDOG_USEC (and WATCHDOG_PID, when set, naming this process): ping at
 * half the interval, as sd_watchdog_enabled(3) advises. */
uint64_t service_watchdog_usec(void) {
        const char *s = getenv("WATCHDOG_USEC"), *pid = getenv("WATCHDOG_PID");
        if (!s || !*s)
                return 0;
        if (pid && *pid && strtol(pid, NULL, 10) != (long) getpid())
                return 0;
        char *end;
        errno = 0;
        unsigned long long v = strtoull(s, &end, 10);
        if (errno || *end || v == 0) {
                hvd_log_warning("ignoring WATCHDOG_USEC='%s': not a positive number", s);
                return 0;
        }
        return v / 2 ? v / 2 : 1;
}

/* STATUS= for systemctl status, sent when the counts change. */
void service_notify_status(hvd_daemon_t *d) {
        size_t nj = hvd_strmap_size(d->jobs), nw = hvd_strmap_size(d->workers);
        if (nj == d->status_jobs && nw == d->status_workers)
                return;
        d->status_jobs = nj;
        d->status_workers = nw;
        char st[PATH_MAX + 128];
        snprintf(st, sizeof st, "STATUS=Serving %zu job%s, %zu worker%s on %s", nj, nj == 1 ? "" : "s", nw,
                 nw == 1 ? "" : "s", d->worker_ep + 6);
        service_notify(st);
}
