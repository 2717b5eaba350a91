/* elastic_driver.c — hvdrun's elastic mode: the options and the variables
 * the workers get, the host discovery script (run with a deadline, its
 * output checked line by line: a failure or garbage keeps the hosts the
 * job has), and the blacklist of failing hosts with its cool-down. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "elastic_driver.h"

#define MAX_HOSTS     1024
#define SCRIPT_USEC   (10ULL * 1000000)
#define OUTPUT_BYTES  65536
#define USEC_PER_SEC_ 1000000ULL

const char *const hvd_elastic_opt_names[HVD_ELASTIC_N_OPTS] = {
        "min-np",
        "max-np",
        "host-discovery-script",
        "slots",
        "elastic-timeout",
        "reset-limit",
        "blacklist-cooldown",
        "discovery-interval",
        "discover-daemons",
        "ssh-offered-hosts",
};

void hvd_elastic_opts_init(hvd_elastic_opts_t *eo) {
        *eo = (hvd_elastic_opts_t){ .slots = 1, .timeout_sec = 600, .cooldown_sec = 60, .interval_sec = 1 };
}

static int number(const char *arg, double lo, double hi, double *ret) {
        char *end;
        errno = 0;
        double x = strtod(arg, &end);
        if (errno || end == arg || *end || !(x >= lo && x <= hi))
                return -EINVAL;
        *ret = x;
        return 0;
}

int hvd_elastic_opt_parse(hvd_elastic_opts_t *eo, int which, const char *arg, char *err, size_t len) {
        double x;
        const char *name = which >= 0 && which < HVD_ELASTIC_N_OPTS ? hvd_elastic_opt_names[which] : "?";
        switch (which) {
        case HVD_ELASTIC_OPT_DAEMONS: eo->daemons = true; return 0;
        case HVD_ELASTIC_OPT_SSH_OFFERED: eo->daemons = eo->ssh_offered = true; return 0;
        case HVD_ELASTIC_OPT_DISCOVERY:
                if (!*arg) {
                        snprintf(err, len, "--%s: expected a program", name);
                        return -EINVAL;
                }
                eo->discovery = arg;
                return 0;
        case HVD_ELASTIC_OPT_MIN_NP:
        case HVD_ELASTIC_OPT_MAX_NP:
        case HVD_ELASTIC_OPT_SLOTS:
        case HVD_ELASTIC_OPT_RESET_LIMIT:
                if (number(arg, which == HVD_ELASTIC_OPT_RESET_LIMIT ? 0 : 1, 65536, &x) < 0 || x != (long) x) {
                        snprintf(err, len, "--%s '%s': expected a whole number in %d..65536", name, arg,
                                 which == HVD_ELASTIC_OPT_RESET_LIMIT ? 0 : 1);
                        return -EINVAL;
                }
                *(which == HVD_ELASTIC_OPT_MIN_NP   ? &eo->min_np
                  : which == HVD_ELASTIC_OPT_MAX_NP ? &eo->max_np
                  : which == HVD_ELASTIC_OPT_SLOTS  ? &eo->slots
                                                    : &eo->reset_limit) = (long) x;
                return 0;
        case HVD_ELASTIC_OPT_TIMEOUT:
        case HVD_ELASTIC_OPT_COOLDOWN:
        case HVD_ELASTIC_OPT_INTERVAL:
                if (number(arg, which == HVD_ELASTIC_OPT_INTERVAL ? 0.01 : 0, 86400, &x) < 0) {
                        snprintf(err, len, "--%s '%s': expected seconds in %s..86400", name, arg,
                                 which == HVD_ELASTIC_OPT_INTERVAL ? "0.01" : "0");
                        return -EINVAL;
                }
                *(which == HVD_ELASTIC_OPT_TIMEOUT    ? &eo->timeout_sec
                  : which == HVD_ELASTIC_OPT_COOLDOWN ? &eo->cooldown_sec
                                                      : &eo->interval_sec) = x;
                return 0;
        default: snprintf(err, len, "unknown elastic option"); return -EINVAL;
        }
}

bool hvd_elastic_on(const hvd_elastic_opts_t *eo) {
        return eo->min_np || eo->max_np || eo->discovery || eo->daemons;
}

int hvd_elastic_opts_check(hvd_elastic_opts_t *eo, long np, char *err, size_t len) {
        if (!eo->min_np)
                eo->min_np = eo->max_np && eo->max_np < np ? eo->max_np : np;
        if (!eo->max_np)
                eo->max_np = eo->min_np > np ? eo->min_np : np;
        if (eo->min_np > eo->max_np) {
                snprintf(err, len, "--min-np %ld is above --max-np %ld", eo->min_np, eo->max_np);
                return -EINVAL;
        }
        if (np > eo->max_np) {
                snprintf(err, len, "-np %ld is above --max-np %ld", np, eo->max_np);
                return -EINVAL;
        }
        return 0;
}

size_t hvd_elastic_env(const hvd_elastic_opts_t *eo, char out[][64], size_t max) {
        size_t n = 0;
        if (n < max)
                snprintf(out[n++], 64, "HVD_ELASTIC=1");
        if (n < max)
                snprintf(out[n++], 64, "HVD_ELASTIC_MIN_NP=%ld", eo->min_np);
        if (n < max)
                snprintf(out[n++], 64, "HVD_ELASTIC_MAX_NP=%ld", eo->max_np);
        if (n < max)
                snprintf(out[n++], 64, "HVD_ELASTIC_TIMEOUT=%g", eo->timeout_sec);
        if (n < max)
                snprintf(out[n++], 64, "HVD_ELASTIC_RESET_LIMIT=%ld", eo->reset_limit);
        return n;
}

/* ---- host discovery ---- */

typedef struct bl {
        char name[256];
        uint64_t until_usec;
} bl_t;

struct hvd_discovery {
        char *script;
        long slots;
        uint64_t interval_usec, cooldown_usec, next_usec;
        hvd_discovered_t hosts[MAX_HOSTS], shown[MAX_HOSTS];
        size_t n_shown;
        bl_t bl[MAX_HOSTS];
        size_t n_bl;
        char last_error[512];
};

static uint64_t now_usec(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * USEC_PER_SEC_ + (uint64_t) ts.tv_nsec / 1000;
}

int hvd_discovery_new(const hvd_elastic_opts_t *eo, hvd_discovery_t **ret) {
        hvd_discovery_t *d = calloc(1, sizeof *d);
        if (!d || !(d->script = strdup(eo->discovery ? eo->discovery : ""))) {
                free(d);
                return -ENOMEM;
        }
        d->slots = eo->slots;
        d->interval_usec = (uint64_t) (eo->interval_sec * 1e6);
        d->cooldown_usec = (uint64_t) (eo->cooldown_sec * 1e6);
        d->next_usec = eo->discovery || eo->daemons ? 0 : UINT64_MAX;
        *ret = d;
        return 0;
}

void hvd_discovery_destroy(hvd_discovery_t **d) {
        if (!d || !*d)
                return;
        free((*d)->script);
        free(*d);
        *d = NULL;
}

uint64_t hvd_discovery_deadline(const hvd_discovery_t *d) {
        return d ? d->next_usec : UINT64_MAX;
}

static bool host_char(char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-' ||
               c == '_';
}

int hvd_discovery_parse(const char *text, long default_slots, hvd_discovered_t *out, size_t max, size_t *n, char *err,
                        size_t len) {
        size_t k = 0, line_no = 0;
        for (const char *p = text; *p;) {
                const char *eol = strchr(p, '\n');
                size_t l = eol ? (size_t) (eol - p) : strlen(p);
                line_no++;
                char line[512];
                if (l >= sizeof line) {
                        snprintf(err, len, "line %zu is longer than %zu bytes", line_no, sizeof line - 1);
                        return -EINVAL;
                }
                memcpy(line, p, l);
                line[l] = 0;
                p += l + (eol ? 1 : 0);
                char *s = line, *e = line + l;
                while (*s == ' ' || *s == '\t')
                        s++;
                while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r'))
                        *--e = 0;
                if (!*s || *s == '#')
                        continue;
                char *colon = strchr(s, ':');
                size_t hl = colon ? (size_t) (colon - s) : strlen(s);
                bool ok = hl > 0 && hl < sizeof out->name;
                for (size_t i = 0; ok && i < hl; i++)
                        ok = host_char(s[i]);
                long slots = default_slots;
                if (ok && colon) {
                        char *end;
                        errno = 0;
                        slots = strtol(colon + 1, &end, 10);
                        ok = !errno && end != colon + 1 && !*end && slots >= 1 && slots <= 4096;
                }
                if (!ok) {
                        snprintf(err, len, "line %zu, '%.200s', is not HOST or HOST:SLOTS", line_no, s);
                        return -EINVAL;
                }
                if (k == max) {
                        snprintf(err, len, "more than %zu hosts", max);
                        return -E2BIG;
                }
                for (size_t i = 0; i < k; i++)
                        if (strlen(out[i].name) == hl && memcmp(out[i].name, s, hl) == 0) {
                                snprintf(err, len, "line %zu: host '%.*s' listed twice", line_no, (int) hl, s);
                                return -EINVAL;
                        }
                memcpy(out[k].name, s, hl);
                out[k].name[hl] = 0;
                out[k++].slots = slots;
        }
        *n = k;
        return 0;
}

/* Runs the script; its output in buf. 0, or < 0 with a message. */
static int run_script(const hvd_discovery_t *d, char *buf, size_t cap, char *err, size_t len) {
        int p[2];
        if (pipe2(p, O_CLOEXEC) < 0) {
                snprintf(err, len, "cannot create a pipe: %s", strerror(errno));
                return -errno;
        }
        pid_t pid = fork();
        if (pid < 0) {
                close(p[0]);
                close(p[1]);
                snprintf(err, len, "cannot fork: %s", strerror(errno));
                return -EAGAIN;
        }
        if (pid == 0) {
                sigset_t all;
                sigemptyset(&all);
                sigprocmask(SIG_SETMASK, &all, NULL);
                dup2(p[1], 1);
                execl("/bin/sh", "sh", "-c", d->script, (char *) NULL);
                _exit(127);
        }
        close(p[1]);
        size_t got = 0;
        uint64_t deadline = now_usec() + SCRIPT_USEC;
        bool timed_out = false;
        for (;;) {
                uint64_t now = now_usec();
                if (now >= deadline) {
                        timed_out = true;
                        break;
                }
                struct pollfd pfd = { .fd = p[0], .events = POLLIN };
                int k = poll(&pfd, 1, (int) ((deadline - now) / 1000 + 1));
                if (k < 0 && errno == EINTR)
                        continue;
                if (k <= 0)
                        continue;
                ssize_t r = read(p[0], buf + got, cap - 1 - got);
                if (r < 0 && errno == EINTR)
                        continue;
                if (r <= 0)
                        break;
                got += (size_t) r;
                if (got == cap - 1)
                        break;
        }
        close(p[0]);
        buf[got] = 0;
        if (timed_out)
                kill(pid, SIGKILL);
        int status = 0;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
                ;
        if (timed_out) {
                snprintf(err, len, "did not finish within %.0f s", (double) SCRIPT_USEC / 1e6);
                return -ETIMEDOUT;
        }
        if (got == cap - 1) {
                snprintf(err, len, "printed more than %zu bytes", cap - 1);
                return -E2BIG;
        }
        if (WIFEXITED(status) && WEXITSTATUS(status) != 0) {
                snprintf(err, len, "exited with status %d", WEXITSTATUS(status));
                return -EIO;
        }
        if (WIFSIGNALED(status)) {
                snprintf(err, len, "was killed by signal %d", WTERMSIG(status));
                return -EIO;
        }
        return 0;
}

int hvd_discovery_poll(hvd_discovery_t *d, uint64_t now, const hvd_discovered_t **hosts, size_t *n) {
        if (!d || now < d->next_usec)
                return 0;
        d->next_usec = now + d->interval_usec;
        if (!d->script[0]) {
                d->n_shown = 0;
                *hosts = d->shown;
                *n = 0;
                return 1;
        }
        char *buf = malloc(OUTPUT_BYTES), err[512];
        if (!buf)
                return -ENOMEM;
        size_t k = 0;
        int r = run_script(d, buf, OUTPUT_BYTES, err, sizeof err);
        if (r >= 0)
                r = hvd_discovery_parse(buf, d->slots, d->hosts, MAX_HOSTS, &k, err, sizeof err);
        free(buf);
        if (r < 0) {
                if (strcmp(err, d->last_error) != 0)
                        fprintf(stderr, "hvdrun: host discovery script '%s' %s%s; keeping the job's hosts\n", d->script,
                                r == -EINVAL || r == -E2BIG ? "printed garbage: " : "", err);
                snprintf(d->last_error, sizeof d->last_error, "%s", err);
                return r;
        }
        d->last_error[0] = 0;
        size_t o = 0;
        for (size_t i = 0; i < k; i++)
                if (!hvd_discovery_blacklisted(d, d->hosts[i].name, now))
                        d->shown[o++] = d->hosts[i];
        d->n_shown = o;
        *hosts = d->shown;
        *n = o;
        return 1;
}

int hvd_discovery_add(hvd_discovery_t *d, const char *name, long slots, uint64_t now, const hvd_discovered_t **hosts,
                      size_t *n) {
        *hosts = d->shown;
        *n = d->n_shown;
        if (strlen(name) >= sizeof d->shown[0].name || hvd_discovery_blacklisted(d, name, now))
                return 0;
        for (size_t i = 0; i < d->n_shown; i++)
                if (strcmp(d->shown[i].name, name) == 0)
                        return 0;
        if (d->n_shown == MAX_HOSTS)
                return -E2BIG;
        hvd_discovered_t *h = &d->shown[d->n_shown++];
        snprintf(h->name, sizeof h->name, "%s", name);
        h->slots = slots > 0 ? slots : d->slots;
        *n = d->n_shown;
        return 1;
}

void hvd_discovery_blacklist(hvd_discovery_t *d, const char *host, uint64_t now) {
        if (!d || !d->cooldown_usec)
                return;
        size_t i = 0;
        while (i < d->n_bl && strcmp(d->bl[i].name, host) != 0)
                i++;
        if (i == d->n_bl) {
                if (d->n_bl == MAX_HOSTS)
                        return;
                d->n_bl++;
                snprintf(d->bl[i].name, sizeof d->bl[i].name, "%s", host);
        }
        d->bl[i].until_usec = now + d->cooldown_usec;
        fprintf(stderr, "hvdrun: host %s blacklisted for %.0f s: a worker there failed\n", host,
                (double) d->cooldown_usec / 1e6);
}

bool hvd_discovery_blacklisted(const hvd_discovery_t *d, const char *host, uint64_t now) {
        for (size_t i = 0; d && i < d->n_bl; i++)
                if (strcmp(d->bl[i].name, host) == 0)
                        return now < d->bl[i].until_usec;
        return false;
}
