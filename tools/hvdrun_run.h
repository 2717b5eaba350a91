/* hvdrun_run.h — what hvdrun's launch (tools/hvdrun.c's main() over
 * tools/hvdrun_env.c, hvdrun_daemons.c, hvdrun_command.c, hvdrun_workers.c)
 * and its elastic mode (tools/hvdrun_elastic.c) share: the job, the workers
 * and the run's state, and the steps they take (a worker's environment and
 * start, a private daemon). Program-internal. */
#ifndef HVD_TOOLS_HVDRUN_RUN_H
#define HVD_TOOLS_HVDRUN_RUN_H

#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "elastic_driver.h"
#include "embedded.h"
#include "hvdrun.h"

typedef struct job {
        char id[4 + 32 + 1];
        char secret[33];
        int cross_size; /* hosts with ranks */
        bool all_here;  /* no remote host: every daemon of the job runs on this machine */
        bool any_here, any_remote;
        host_t *root; /* the host of rank 0: its daemon is the job's root */
        char root_peer[ENDPOINT_BYTES];
        char *hosts_var;            /* HVD_HOSTS, owned */
        char cwd[PATH_MAX];         /* "" when unknown: remote ranks start in the home directory */
        char me[HOST_NAME_MAX + 1]; /* gethostname() */
        char **ssh_words;           /* owned: --ssh split at blanks */
        size_t n_ssh_words;
} job_t;

typedef struct stream {
        int fd;     /* read end of the worker's pipe, -1 once closed */
        int out_fd; /* 1 or 2 */
        char *buf;
        size_t len;
} stream_t;

typedef struct worker {
        int rank;
        host_t *host;
        pid_t pid;    /* also its process group; 0 = not started */
        bool exited;  /* seen with WNOWAIT: a zombie we still hold */
        bool stopped; /* elastic: its host left the discovered ones, SIGTERM sent */
        bool reaped;
        int status; /* exit code, or 128 + signal */
        stream_t out, err;
        char **envp; /* owned; NULL = ours (ssh) */
        char **argv; /* owned; NULL = PROGRAM ARGS (local ranks) */
        char **vars; /* owned: NAME=VALUE set after hvdrun's own (elastic mode), or NULL */
        char *shown; /* owned: the command line --dry-run prints */
        bool bound;  /* forked here with its share of the CPUs (cpus) */
        cpu_set_t cpus;
} worker_t;

typedef struct env_list {
        char **v; /* NULL-terminated, every string owned */
        size_t n, cap;
} env_list_t;

typedef struct hvd_warm hvd_warm_t;

typedef struct run {
        worker_t *w;
        int n;
        int sfd;
        bool verbose;
        bool prefix_host;
        bool srun;  /* every rank is a local srun process */
        bool multi; /* several hosts: messages name the host */
        uint64_t grace_usec;
        int first_fail_rank; /* -1 = none yet */
        int exit_status;
        int interrupt_sig; /* SIGINT/SIGTERM/SIGHUP received, 0 = none */
        uint64_t grace_deadline, kill_deadline, drain_deadline;
        bool term_sent, kill_sent;
        bool out_dead[3]; /* EPIPE on our stdout/stderr: discard */
        char *scratch;
        size_t scratch_cap;
        const job_t *job;
        const char *ssh_path; /* resolved ssh_words[0] */
        host_t *hosts;
        size_t n_hosts;
        pid_t *helpers; /* remote clean-up commands, 0 once reaped */
        size_t n_helpers, cap_helpers;
        pid_t pump; /* copies our stdin to a remote rank 0, 0 = none */
        /* elastic mode: workers are added (w has room for cap), hosts too */
        const options_t *o;
        const char *path;
        hvd_discovery_t *disc;
        int cap;
        host_t *added[64];
        size_t n_added;
        hvd_daemon_offer_t *offers; /* --discover-daemons: the root daemon's last answer, [MAX_OFFERS] */
        char offers_error[512];     /* its last failure, printed once */
        bool root_kept;             /* the root host's workers were kept once the script dropped it */
        int last_status;            /* of the worker that exited last */
        bool finished;              /* a worker exited with status 0: the training is done */
        hvd_warm_t *warm;           /* elastic: standby interpreters (tools/hvdrun_warm.c), or NULL */
} run_t;

/* ---- tools/hvdrun_env.c: environment lists, PATH lookup ---- */

/* Frees a NULL-terminated array of owned strings (NULL-safe). */
void strv_free(char **v);
/* Frees e's strings and array, and empties e (NULL-safe). */
void env_list_free(env_list_t *e);
/* Puts entry "NAME=VALUE" (taken; NULL: -ENOMEM) in e, replacing an earlier NAME. 0 or -ENOMEM. */
int env_list_put(env_list_t *e, char *entry);
/* Sets NAME=printf(fmt, ...) in e, replacing an earlier NAME. 0 or -ENOMEM. */
int env_list_set(env_list_t *e, const char *name, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Appends copies of src's strings to dst (kept NULL-terminated, also when empty). 0 or -ENOMEM. */
int env_list_copy(env_list_t *dst, char *const *src);
/* prog looked up in path_env: 0 and *ret (free it), 126 / 127 after a message, 1 without memory. */
int resolve_program(const char *prog, const char *path_env, char **ret);

/* ---- tools/hvdrun_daemons.c: the hosts' daemons ---- */

/* Starts a private daemon in a fresh directory, with peer_listen when given; its
 * bound peer endpoint is read back into peer_ep. 0, or < 0 after a message. */
int embedded_start(embedded_t *e, const options_t *o, const char *peer_listen, char *peer_ep, size_t peer_ep_len);
/* Asks a private daemon to stop (NULL-safe); embedded_stop() waits for it and
 * removes its directory. */
void embedded_ask_stop(embedded_t *e);
void embedded_stop(embedded_t *e);
/* Finds or starts the daemon of every host with ranks. 0, or < 0 after a message. */
int start_daemons(const options_t *o, job_t *job);
/* Stops the private daemons of hosts[0..n) and removes their directories. */
void stop_daemons(host_t *hosts, size_t n);
/* Sets job->root_peer (HVD_ROOT_PEER) for a job that spans hosts. 0, or -EINVAL after a message. */
int find_root_peer(const options_t *o, job_t *job);

/* ---- tools/hvdrun_command.c: a rank's environment and command line ---- */

/* The environment (and, over ssh or srun, the command line) of worker w, local
 * rank local_rank of its host, into w (owned there). 0 or < 0. */
int prepare_worker(const options_t *o, const job_t *job, const char *path, worker_t *w, int local_rank);
/* The ssh command line that runs command on host (owned: strv_free()), or NULL. */
char **ssh_argv(const job_t *job, const char *host, const char *command);

/* ---- tools/hvdrun_workers.c: the workers' processes and the loop ---- */

/* Forks and runs worker w (path, argv), reading in_fd; prefix: its output
 * through pipes. 0, or < 0 after a message. */
int spawn_worker(worker_t *w, const char *path, char *const *argv, bool prefix, int in_fd);
/* Gives the ranks that run here their share of our CPUs (--cpu-bind). */
void bind_workers(const options_t *o, run_t *run);
/* The workers started and not yet exited. */
int count_live(const run_t *run);
/* The standard input of a rank started over ssh: the job secret on the first
 * line, then our stdin (with_our_stdin, through a pump process) or nothing.
 * The read end, to close after the fork, or < 0. */
int remote_stdin(run_t *run, bool with_our_stdin);
/* Sends sig to every process of the job on remote host h, over ssh (once per
 * signal and host; in the background, reaped with the helpers). */
void remote_signal(run_t *run, host_t *h, int sig);
/* Sends sig to every worker's process group (a remote rank's: see remote_signal()). */
void kill_groups(run_t *run, int sig);
/* "SIGINT", "SIGTERM", "SIGHUP" or "a signal": for messages. */
const char *signame(int sig);
/* Runs until every worker exited and its output is passed on. */
void run_loop(run_t *run);
/* Kills and reaps what is left of the workers, the stdin pump and the helpers. */
void reap_all(run_t *run);
/* Closes the workers' pipes and frees the workers and the run's buffers (NULL-safe). */
void run_free(run_t *run);

/* ---- tools/hvdrun_elastic.c: workers and hosts come and go ---- */

/* A worker of an elastic job ended (w->status set): the others go on. */
void elastic_exit(run_t *run, worker_t *w, const siginfo_t *si);
/* When the discovery is due: hosts no longer discovered lose their workers,
 * new ones get workers (up to --max-np in all). */
void elastic_discover(run_t *run, uint64_t now);
/* Stops the daemons of the hosts added and frees them (and the offers read). */
void elastic_free_hosts(run_t *run);
/* Before any worker starts: --discover-daemons needs the root daemon's peer
 * endpoint (shown); a discovery script must list the first host. 0, or
 * -EINVAL after a message. */
int elastic_daemons_check(const run_t *run);
int elastic_root_listed(run_t *run);

/* ---- tools/hvdrun_warm.c: warm starts of Python workers ---- */

/* Once worker 0's environment is prepared: sets run->warm when the job's new
 * workers may start warm (--elastic-warm-start, an elastic job, `python
 * SCRIPT ...`). 0, -ENOMEM, or -EINVAL after a message (on, where it cannot
 * apply). */
int warm_new(run_t *run);
/* Stops every standby and frees (NULL-safe). */
void warm_free(hvd_warm_t *wm);
/* At every turn of hvdrun's loop: notices standbys that ended (a failure
 * turns warm starts off, with a line), starts the ones missing. */
void warm_tick(run_t *run, uint64_t now);
/* Makes a ready standby worker w (w->envp prepared): w->pid and its output
 * set, a line printed. 0, or -EAGAIN when none is ready: start it cold. */
int warm_take(run_t *run, worker_t *w);

/* ---- tools/hvdrun_remote.c: an elastic job's hosts on other machines ---- */

/* Whether an elastic job may grow onto other machines: --root-peer names a
 * non-loopback endpoint of its root daemon (they reach it there), the hosts
 * are not emulated and the launcher is ssh. */
bool remote_elastic_ready(const options_t *o);
/* Why a discovered host of another machine (off: the offer, for an offered
 * one) gets no workers, into msg; NULL when it can get them over ssh. */
const char *remote_refusal(const run_t *run, const hvd_daemon_offer_t *off, char *msg, size_t len);
/* Starts worker w, local rank lr of n on its remote host, over ssh; the root
 * daemon places it. 0, or < 0 after a message. */
int remote_spawn(run_t *run, worker_t *w, int lr, int n);
/* Stops worker w of a host no longer discovered: its local ssh and, over
 * ssh, the job's processes on that host. */
void remote_stop(run_t *run, worker_t *w);
/* Worker w's ssh session ended with status 255 (ssh failed, or the remote
 * program was killed by a signal): the host counts as lost, and whatever of
 * the job still runs there is stopped. */
void remote_lost(run_t *run, worker_t *w);

#endif
