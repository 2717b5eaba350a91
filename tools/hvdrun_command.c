/* hvdrun_command.c — what starts one rank: the variables hvdrun sets for it
 * (the job, its host, its rank, under hvd's and Horovod's names), then its
 * environment (a local rank: ours with those set), its srun command line, or
 * its ssh command line (a remote rank: `cd CWD && exec env VARS PROGRAM
 * ARGS`, every word quoted; the job secret never on it but read from the
 * rank's standard input), and with --dry-run the command line shown. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "elastic_driver.h"
#include "hvdrun.h"
#include "hvdrun_run.h"
#include "launcher.h"
#include "shellquote.h"
#include "util.h"

extern char **environ;

/* The variables hvdrun sets for one rank (not the inherited environment): -x, the
 * knobs, the job, the host, the rank, under hvd's and Horovod's names. */
static int rank_vars(const options_t *o, const job_t *job, const host_t *h, int local_rank, env_list_t *e) {
        int r, rank = h->first_rank + local_rank;
        for (size_t i = 0; i < o->n_exports; i++) {
                const char *x = o->exports[i], *val = strchr(x, '=') ? NULL : getenv(x);
                if (strchr(x, '=')) {
                        if ((r = env_list_put(e, strdup(x))) < 0)
                                return r;
                } else if (val && (r = env_list_set(e, x, "%s", val)) < 0)
                        return r;
        }
        if ((o->fusion_mb && (r = env_list_set(e, "HVD_FUSION_THRESHOLD", "%" PRIu64, o->fusion_bytes)) < 0) ||
            (o->cycle_ms && (r = env_list_set(e, "HVD_CYCLE_TIME", "%s", o->cycle_ms)) < 0) ||
            (o->start_timeout && (r = env_list_set(e, "HVD_START_TIMEOUT", "%s", o->start_timeout)) < 0) ||
            (o->timeline && (r = env_list_set(e, "HVD_TIMELINE", "%s", o->timeline)) < 0) ||
            (o->timeline_mark_cycles && (r = env_list_set(e, "HVD_TIMELINE_MARK_CYCLES", "1")) < 0))
                return r;
        for (int k = 0; k < HVD_TUNE_OPTIONS; k++)
                if (o->tune[k] && (r = env_list_set(e, hvd_tune_option_var(k), "%s", o->tune[k])) < 0)
                        return r;
        /* Horovod's cross rank/size: among the hosts that have this local rank */
        int hcr = 0, hcs = 0;
        for (size_t i = 0; i < o->n_hosts; i++) {
                const host_t *g = &o->hosts[i];
                if (g == h)
                        hcr = hcs;
                if (g->n_ranks > local_rank)
                        hcs++;
        }
        const char *hostname = h->kind == HOST_LOCAL && is_loopback_name(h->name) ? job->me : h->name;
        if ((r = env_list_set(e, "HVD_JOB_ID", "%s", job->id)) < 0 ||
            ((h->kind != HOST_REMOTE || o->launcher == HVD_LAUNCH_SRUN) &&
             (r = env_list_set(e, "HVD_JOB_SECRET", "%s", job->secret)) < 0) ||
            (r = env_list_set(e, "HVD_SIZE", "%ld", o->np)) < 0 || (r = env_list_set(e, "HVD_RANK", "%d", rank)) < 0 ||
            (r = env_list_set(e, "HVD_LOCAL_RANK", "%d", local_rank)) < 0 ||
            (r = env_list_set(e, "HVD_LOCAL_SIZE", "%d", h->n_ranks)) < 0 ||
            (r = env_list_set(e, "HVD_CROSS_RANK", "%d", h->cross_rank)) < 0 ||
            (r = env_list_set(e, "HVD_CROSS_SIZE", "%d", job->cross_size)) < 0 ||
            (r = env_list_set(e, "HVD_HOSTNAME", "%s", hostname)) < 0)
                return r;
        if (h->kind != HOST_REMOTE &&
            (r = env_list_set(e, "HVD_COORDINATOR", "ipc://%s/worker.sock", h->runtime_dir)) < 0)
                return r;
        if ((r = env_list_set(e, "HVD_RUNTIME_DIR", "%s", h->runtime_dir)) < 0)
                return r;
        if (job->cross_size > 1 && ((r = env_list_set(e, "HVD_HOSTS", "%s", job->hosts_var)) < 0 ||
                                    (r = env_list_set(e, "HVD_ROOT_PEER", "%s", job->root_peer)) < 0))
                return r;
        /* hosts of one machine reach each other's ranks on loopback */
        bool elastic = hvd_elastic_on(&o->elastic);
        if ((job->cross_size > 1 || elastic) && job->all_here &&
            (r = env_list_set(e, "HVD_DATA_ADDR", "127.0.0.1")) < 0)
                return r;
        char ev[8][64];
        for (size_t i = 0, n = elastic ? hvd_elastic_env(&o->elastic, ev, 8) : 0; i < n; i++)
                if ((r = env_list_put(e, strdup(ev[i]))) < 0)
                        return r;
        if (elastic && job->cross_size == 1 && job->root_peer[0] &&
            (r = env_list_set(e, "HVD_ROOT_PEER", "%s", job->root_peer)) < 0)
                return r;
        if ((r = env_list_set(e, "HOROVOD_RANK", "%d", rank)) < 0 ||
            (r = env_list_set(e, "HOROVOD_SIZE", "%ld", o->np)) < 0 ||
            (r = env_list_set(e, "HOROVOD_LOCAL_RANK", "%d", local_rank)) < 0 ||
            (r = env_list_set(e, "HOROVOD_LOCAL_SIZE", "%d", h->n_ranks)) < 0 ||
            (r = env_list_set(e, "HOROVOD_CROSS_RANK", "%d", hcr)) < 0 ||
            (r = env_list_set(e, "HOROVOD_CROSS_SIZE", "%d", hcs)) < 0 ||
            (r = env_list_set(e, "HOROVOD_HOSTNAME", "%s", hostname)) < 0)
                return r;
        return 0;
}

/* "cd CWD && exec env VAR=VALUE... PROGRAM ARGS...", every word quoted for a
 * POSIX shell (shown: for showing, see hvd_strbuf_quoted_shown()). With
 * read_secret, the job secret is read from the first line of standard input
 * first, so that it never appears on a command line. */
static char *shell_command(const job_t *job, char *const *vars, const char *prog, char *const *args, bool read_secret,
                           bool shown) {
        void (*quoted)(hvd_strbuf_t *, const char *) = shown ? hvd_strbuf_quoted_shown : hvd_strbuf_quoted;
        hvd_strbuf_t b = { 0 };
        if (job->cwd[0]) {
                hvd_strbuf_puts(&b, "cd ");
                quoted(&b, job->cwd);
                hvd_strbuf_puts(&b, " && ");
        }
        if (read_secret)
                hvd_strbuf_puts(&b, "IFS= read -r HVD_JOB_SECRET && export HVD_JOB_SECRET && ");
        hvd_strbuf_puts(&b, "exec env");
        for (size_t i = 0; vars && vars[i]; i++) {
                hvd_strbuf_puts(&b, " ");
                quoted(&b, vars[i]);
        }
        hvd_strbuf_puts(&b, " ");
        quoted(&b, prog);
        for (size_t i = 0; args && args[i]; i++) {
                hvd_strbuf_puts(&b, " ");
                quoted(&b, args[i]);
        }
        return hvd_strbuf_take(&b);
}

/* SSH... -o BatchMode=yes -o StrictHostKeyChecking=accept-new HOST COMMAND; owned. */
char **ssh_argv(const job_t *job, const char *host, const char *command) {
        static const char *const opts[] = { "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=accept-new" };
        size_t n = job->n_ssh_words + ELEMENTSOF(opts) + 2;
        char **v = calloc(n + 1, sizeof *v);
        if (!v)
                return NULL;
        size_t k = 0;
        for (size_t i = 0; i < job->n_ssh_words; i++)
                v[k++] = strdup(job->ssh_words[i]);
        for (size_t i = 0; i < ELEMENTSOF(opts); i++)
                v[k++] = strdup(opts[i]);
        v[k++] = strdup(host);
        v[k++] = strdup(command);
        for (size_t i = 0; i < k; i++)
                if (!v[i]) {
                        for (size_t j = 0; j < k; j++)
                                free(v[j]);
                        free(v);
                        return NULL;
                }
        return v;
}

static char *argv_shown(char *const *argv) {
        hvd_strbuf_t b = { 0 };
        for (size_t i = 0; argv[i]; i++) {
                if (i)
                        hvd_strbuf_puts(&b, " ");
                hvd_strbuf_quoted_shown(&b, argv[i]);
        }
        return hvd_strbuf_take(&b);
}

/* Fills in w's environment (local rank) or ssh command line (remote rank), and with
 * --dry-run the command line to show. */
int prepare_worker(const options_t *o, const job_t *job, const char *path, worker_t *w, int local_rank) {
        env_list_t vars = { 0 }, env = { 0 };
        host_t *h = w->host;
        char *cmd = NULL;
        int r = -ENOMEM;
        bool ssh = h->kind == HOST_REMOTE && o->launcher == HVD_LAUNCH_SSH;
        if (ssh) {
                /* the remote login shell's own PATH etc. would find other programs */
                static const char *const pass[] = { "PATH", "LD_LIBRARY_PATH", "PYTHONPATH" };
                for (size_t i = 0; i < ELEMENTSOF(pass); i++) {
                        const char *v = getenv(pass[i]);
                        if (v && (r = env_list_set(&vars, pass[i], "%s", v)) < 0)
                                goto out;
                }
        }
        if ((r = rank_vars(o, job, h, local_rank, &vars)) < 0)
                goto out;
        for (size_t i = 0; w->vars && w->vars[i]; i++)
                if ((r = env_list_put(&vars, strdup(w->vars[i]))) < 0)
                        goto out;
        r = -ENOMEM;
        /* srun runs PROGRAM on the node in our environment: the variables (the
         * secret too) travel with the step, not on a command line */
        if (o->launcher == HVD_LAUNCH_SRUN &&
            !(w->argv = hvd_srun_argv("srun", h->name, w->rank == 0 && !isatty(0), o->argv)))
                goto out;
        if (ssh) {
                if (!(cmd = shell_command(job, vars.v, o->argv[0], o->argv + 1, true, false)) ||
                    !(w->argv = ssh_argv(job, h->name, cmd)))
                        goto out;
                if (o->dry_run && !(w->shown = argv_shown(w->argv)))
                        goto out;
        } else if (o->dry_run) {
                if (!(w->shown = shell_command(job, vars.v, w->argv ? w->argv[0] : path,
                                               w->argv ? w->argv + 1 : o->argv + 1, false, true)))
                        goto out;
        } else {
                if ((r = env_list_copy(&env, environ)) < 0)
                        goto out;
                for (size_t i = 0; i < vars.n; i++)
                        if ((r = env_list_put(&env, strdup(vars.v[i]))) < 0)
                                goto out;
                w->envp = env.v;
                env = (env_list_t){ 0 };
        }
        r = 0;
out:
        free(cmd);
        env_list_free(&vars);
        env_list_free(&env);
        return r;
}
