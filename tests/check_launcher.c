/* check_launcher.c — unit tests of hvdrun's launcher module
 * (tools/launcher.c): --launcher's values, mpirun's refusal; the hosts of a
 * Slurm allocation from its variables (compressed node lists, task counts,
 * the CPU counts when no task count is set) and each inconsistency with its
 * message; the srun command line of a rank; horovodrun's refused options. */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpubind.h"
#include "elastic_driver.h"
#include "launcher.h"

static void slurm_env(const char *nodes, const char *tasks, const char *cpus) {
        unsetenv("SLURM_NODELIST");
        unsetenv("SLURM_STEP_ID");
        setenv("SLURM_JOB_ID", "42", 1);
        if (nodes)
                setenv("SLURM_JOB_NODELIST", nodes, 1);
        else
                unsetenv("SLURM_JOB_NODELIST");
        if (tasks)
                setenv("SLURM_TASKS_PER_NODE", tasks, 1);
        else
                unsetenv("SLURM_TASKS_PER_NODE");
        if (cpus)
                setenv("SLURM_JOB_CPUS_PER_NODE", cpus, 1);
        else
                unsetenv("SLURM_JOB_CPUS_PER_NODE");
}

/* The allocation's hosts joined as "a:2,b:2". */
static char *alloc_hosts(int *r, char *err, size_t err_len) {
        hvd_hostlist_t l = { 0 };
        static char out[1024];
        out[0] = 0;
        *r = hvd_slurm_alloc_hosts(&l, err, err_len);
        for (size_t i = 0; i < l.n; i++)
                snprintf(out + strlen(out), sizeof out - strlen(out), "%s%s:%ld", i ? "," : "", l.v[i].name,
                         l.v[i].slots);
        if (*r == 0)
                ck_assert_int_eq(l.total_slots > 0, 1);
        hvd_hostlist_clear(&l);
        return out;
}

START_TEST(test_launch_mode) {
        hvd_launch_mode_t m = HVD_LAUNCH_AUTO;
        char err[512] = "";
        ck_assert_int_eq(hvd_launch_mode_parse("ssh", &m, err, sizeof err), 0);
        ck_assert_int_eq(m, HVD_LAUNCH_SSH);
        ck_assert_int_eq(hvd_launch_mode_parse("srun", &m, err, sizeof err), 0);
        ck_assert_int_eq(m, HVD_LAUNCH_SRUN);
        ck_assert_int_eq(hvd_launch_mode_parse("mpirun", &m, err, sizeof err), -ENOTSUP);
        ck_assert_ptr_nonnull(strstr(err, "run 'mpirun -np N PROGRAM' itself"));
        ck_assert_int_eq(m, HVD_LAUNCH_SRUN); /* untouched on failure */
        ck_assert_int_eq(hvd_launch_mode_parse("SSH", &m, err, sizeof err), -EINVAL);
        ck_assert_str_eq(err, "--launcher 'SSH': expected ssh or srun");
}
END_TEST

START_TEST(test_alloc_hosts) {
        char err[512] = "";
        int r;
        slurm_env("node[01-03],gpu7", "2(x3),1", "8(x4)");
        ck_assert_str_eq(alloc_hosts(&r, err, sizeof err), "node01:2,node02:2,node03:2,gpu7:1");
        ck_assert_int_eq(r, 0);
        /* no task count: the CPUs */
        slurm_env("a,b", NULL, "4,2");
        ck_assert_str_eq(alloc_hosts(&r, err, sizeof err), "a:4,b:2");
        ck_assert_int_eq(r, 0);
        /* in a step, the task count is the step's: the job's CPUs */
        slurm_env("a,b", "1,0", "4,2");
        setenv("SLURM_STEP_ID", "0", 1);
        ck_assert_str_eq(alloc_hosts(&r, err, sizeof err), "a:4,b:2");
        ck_assert_int_eq(r, 0);
        unsetenv("SLURM_STEP_ID");
        /* salloc's older name of the list */
        slurm_env(NULL, "3", NULL);
        setenv("SLURM_NODELIST", "solo", 1);
        ck_assert_str_eq(alloc_hosts(&r, err, sizeof err), "solo:3");
        ck_assert_int_eq(r, 0);
        ck_assert_int_eq(hvd_slurm_in_allocation(), 1);
        unsetenv("SLURM_JOB_ID");
        ck_assert_int_eq(hvd_slurm_in_allocation(), 0);
}
END_TEST

START_TEST(test_alloc_refusals) {
        char err[512] = "";
        int r;
        slurm_env("n[1-3]", "2(x2)", NULL);
        alloc_hosts(&r, err, sizeof err);
        ck_assert_int_eq(r, -EINVAL);
        ck_assert_str_eq(err, "SLURM_TASKS_PER_NODE='2(x2)' gives 2 nodes, SLURM_JOB_NODELIST 3");
        slurm_env(NULL, "1", NULL);
        alloc_hosts(&r, err, sizeof err);
        ck_assert_int_eq(r, -EINVAL);
        ck_assert_str_eq(err, "in the Slurm allocation 42, SLURM_JOB_NODELIST is not set: give -H HOST:SLOTS");
        slurm_env("n1", NULL, NULL);
        alloc_hosts(&r, err, sizeof err);
        ck_assert_int_eq(r, -EINVAL);
        ck_assert_ptr_nonnull(
                strstr(err, "neither SLURM_TASKS_PER_NODE (outside a step) nor SLURM_JOB_CPUS_PER_NODE is set"));
        slurm_env("n[3-1]", "1", NULL);
        alloc_hosts(&r, err, sizeof err);
        ck_assert_int_eq(r, -EINVAL);
        ck_assert_ptr_nonnull(strstr(err, "SLURM_JOB_NODELIST='n[3-1]': "));
        slurm_env("n1", "x", NULL);
        alloc_hosts(&r, err, sizeof err);
        ck_assert_int_eq(r, -EINVAL);
        ck_assert_ptr_nonnull(strstr(err, "SLURM_TASKS_PER_NODE='x': "));
        /* more tasks than Slurm's limit; a name the -H parser refuses */
        slurm_env("n[1-2]", "4096(x2)", NULL);
        alloc_hosts(&r, err, sizeof err);
        ck_assert_int_eq(r, -EINVAL);
        ck_assert_ptr_nonnull(strstr(err, "SLURM_TASKS_PER_NODE='4096(x2)': "));
        slurm_env("-n1", "1", NULL);
        alloc_hosts(&r, err, sizeof err);
        ck_assert_int_eq(r, -EINVAL);
        ck_assert_msg(strstr(err, "the Slurm allocation's hosts (SLURM_JOB_NODELIST='-n1'): "), "%s", err);
}
END_TEST

START_TEST(test_srun_argv) {
        char *args[] = { "./train", "--epochs", "2", NULL };
        unsetenv("SLURM_CPUS_PER_TASK");
        unsetenv("SLURM_STEP_ID");
        char **v = hvd_srun_argv("/usr/bin/srun", "n07", false, args);
        const char *want[] = { "/usr/bin/srun", "--nodes=1", "--ntasks=1", "--nodelist=n07", "--exact", "--input=none",
                               "./train",       "--epochs",  "2" };
        size_t n = 0;
        ck_assert_ptr_nonnull(v);
        for (; v[n]; n++) {
                ck_assert_uint_lt(n, sizeof want / sizeof *want);
                ck_assert_str_eq(v[n], want[n]);
        }
        ck_assert_uint_eq(n, sizeof want / sizeof *want);
        for (size_t i = 0; v[i]; i++)
                free(v[i]);
        free(v);
        setenv("SLURM_CPUS_PER_TASK", "4", 1);
        v = hvd_srun_argv("srun", "n1", true, args);
        ck_assert_str_eq(v[5], "--input=all");
        ck_assert_str_eq(v[6], "--cpus-per-task=4");
        ck_assert_str_eq(v[7], "./train");
        for (size_t i = 0; v[i]; i++)
                free(v[i]);
        free(v);
        /* hvdrun in a step of its own: the ranks' steps overlap it */
        setenv("SLURM_STEP_ID", "0", 1);
        v = hvd_srun_argv("srun", "n1", false, args);
        ck_assert_str_eq(v[6], "--overlap");
        ck_assert_str_eq(v[7], "--cpus-per-task=4");
        for (size_t i = 0; v[i]; i++)
                free(v[i]);
        free(v);
        unsetenv("SLURM_STEP_ID");
        unsetenv("SLURM_CPUS_PER_TASK");
}
END_TEST

START_TEST(test_horovodrun_refusals) {
        static const char *const refused[] = { "mpi",
                                               "gloo-timeout-seconds",
                                               "network-interface",
                                               "nics",
                                               "blacklist-cooldown-range",
                                               "num-nccl-streams",
                                               "hierarchical-allreduce",
                                               "log-level" };
        for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
                const char *why = hvd_horovodrun_refusal(refused[i]);
                ck_assert_msg(why && *why, "--%s is not refused", refused[i]);
        }
        /* taken or accepted by hvdrun, or not horovodrun's */
        static const char *const not_refused[] = { "gloo", "cache-capacity", "timeline-filename", "np", "m", "min-np",
                                                   "",     "autotune",       "autotune-log-file" };
        for (size_t i = 0; i < sizeof not_refused / sizeof *not_refused; i++)
                ck_assert_ptr_null(hvd_horovodrun_refusal(not_refused[i]));
        /* the autotune options' variables, in the order of launcher.h */
        ck_assert_str_eq(hvd_tune_option_var(0), "HVD_AUTOTUNE");
        ck_assert_str_eq(hvd_tune_option_var(HVD_TUNE_OPTIONS - 1), "HVD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE");
        ck_assert_ptr_null(hvd_tune_option_var(HVD_TUNE_OPTIONS));
        ck_assert_ptr_null(hvd_tune_option_var(-1));
}
END_TEST

START_TEST(test_discovery_parse) {
        hvd_discovered_t h[4];
        size_t n = 0;
        char err[256];
        /* blanks, comments and CRLF are fine; a host without slots gets the default */
        ck_assert_int_eq(hvd_discovery_parse("a:2\n  b \r\n# c:9\n\nnode-1.x:16\n", 3, h, 4, &n, err, sizeof err), 0);
        ck_assert_uint_eq(n, 3);
        ck_assert_str_eq(h[0].name, "a");
        ck_assert_int_eq(h[0].slots, 2);
        ck_assert_str_eq(h[1].name, "b");
        ck_assert_int_eq(h[1].slots, 3);
        ck_assert_str_eq(h[2].name, "node-1.x");
        ck_assert_int_eq(h[2].slots, 16);
        /* garbage names its line; the output stays untouched */
        n = 7;
        ck_assert_int_eq(hvd_discovery_parse("a:2\nb:x\n", 1, h, 4, &n, err, sizeof err), -EINVAL);
        ck_assert_str_eq(err, "line 2, 'b:x', is not HOST or HOST:SLOTS");
        ck_assert_uint_eq(n, 7);
        ck_assert_int_eq(hvd_discovery_parse("a:0\n", 1, h, 4, &n, err, sizeof err), -EINVAL);
        ck_assert_int_eq(hvd_discovery_parse("a b\n", 1, h, 4, &n, err, sizeof err), -EINVAL);
        ck_assert_int_eq(hvd_discovery_parse("a\na:2\n", 1, h, 4, &n, err, sizeof err), -EINVAL);
        ck_assert_str_eq(err, "line 2: host 'a' listed twice");
        ck_assert_int_eq(hvd_discovery_parse("a\nb\nc\nd\ne\n", 1, h, 4, &n, err, sizeof err), -E2BIG);
        /* an empty list is a list: every host gone */
        ck_assert_int_eq(hvd_discovery_parse("", 1, h, 4, &n, err, sizeof err), 0);
        ck_assert_uint_eq(n, 0);
}
END_TEST

START_TEST(test_elastic_opts) {
        hvd_elastic_opts_t eo;
        char err[256];
        hvd_elastic_opts_init(&eo);
        ck_assert(!hvd_elastic_on(&eo));
        ck_assert_int_eq(hvd_elastic_opt_parse(&eo, HVD_ELASTIC_OPT_MIN_NP, "2", err, sizeof err), 0);
        ck_assert(hvd_elastic_on(&eo));
        ck_assert_int_eq(hvd_elastic_opt_parse(&eo, HVD_ELASTIC_OPT_MAX_NP, "0", err, sizeof err), -EINVAL);
        ck_assert_int_eq(hvd_elastic_opt_parse(&eo, HVD_ELASTIC_OPT_TIMEOUT, "x", err, sizeof err), -EINVAL);
        ck_assert_int_eq(hvd_elastic_opts_check(&eo, 4, err, sizeof err), 0);
        ck_assert_int_eq(eo.min_np, 2);
        ck_assert_int_eq(eo.max_np, 4);
        ck_assert_int_eq(hvd_elastic_opt_parse(&eo, HVD_ELASTIC_OPT_MAX_NP, "3", err, sizeof err), 0);
        ck_assert_int_eq(hvd_elastic_opts_check(&eo, 4, err, sizeof err), -EINVAL);
        ck_assert_str_eq(err, "-np 4 is above --max-np 3");
        char env[8][64];
        ck_assert_uint_eq(hvd_elastic_env(&eo, env, 8), 5);
        ck_assert_str_eq(env[0], "HVD_ELASTIC=1");
        ck_assert_str_eq(env[1], "HVD_ELASTIC_MIN_NP=2");
}
END_TEST

START_TEST(test_discovery_offered) {
        /* --discover-daemons alone: elastic, due at once, no script hosts; offered
         * hosts are added once each, with --slots when they give none, blacklisted
         * ones not */
        hvd_elastic_opts_t eo;
        char err[256];
        hvd_elastic_opts_init(&eo);
        ck_assert_int_eq(hvd_elastic_opt_parse(&eo, HVD_ELASTIC_OPT_DAEMONS, NULL, err, sizeof err), 0);
        ck_assert(hvd_elastic_on(&eo));
        ck_assert_int_eq(hvd_elastic_opt_parse(&eo, HVD_ELASTIC_OPT_SLOTS, "3", err, sizeof err), 0);
        ck_assert(!eo.ssh_offered);
        /* --ssh-offered-hosts: the offers of other machines too, over ssh */
        hvd_elastic_opts_t so;
        hvd_elastic_opts_init(&so);
        ck_assert_int_eq(hvd_elastic_opt_parse(&so, HVD_ELASTIC_OPT_SSH_OFFERED, NULL, err, sizeof err), 0);
        ck_assert(so.daemons && so.ssh_offered && hvd_elastic_on(&so));
        ck_assert_str_eq(hvd_elastic_opt_names[HVD_ELASTIC_OPT_SSH_OFFERED], "ssh-offered-hosts");
        hvd_discovery_t *d = NULL;
        ck_assert_int_eq(hvd_discovery_new(&eo, &d), 0);
        ck_assert_uint_eq(hvd_discovery_deadline(d), 0);
        const hvd_discovered_t *hs = NULL;
        size_t n = 99;
        ck_assert_int_eq(hvd_discovery_poll(d, 1000, &hs, &n), 1);
        ck_assert_uint_eq(n, 0);
        ck_assert_int_eq(hvd_discovery_poll(d, 1001, &hs, &n), 0); /* not due again yet */
        ck_assert_int_eq(hvd_discovery_add(d, "c", 2, 1001, &hs, &n), 1);
        ck_assert_int_eq(hvd_discovery_add(d, "e", 0, 1001, &hs, &n), 1);
        ck_assert_int_eq(hvd_discovery_add(d, "c", 5, 1001, &hs, &n), 0);
        hvd_discovery_blacklist(d, "f", 1001);
        ck_assert_int_eq(hvd_discovery_add(d, "f", 1, 1002, &hs, &n), 0);
        ck_assert_uint_eq(n, 2);
        ck_assert_str_eq(hs[0].name, "c");
        ck_assert_int_eq(hs[0].slots, 2);
        ck_assert_str_eq(hs[1].name, "e");
        ck_assert_int_eq(hs[1].slots, 3);
        /* the next poll starts from no host again */
        ck_assert_int_eq(hvd_discovery_poll(d, 1000 + 1000001, &hs, &n), 1);
        ck_assert_uint_eq(n, 0);
        hvd_discovery_destroy(&d);
        ck_assert_ptr_null(d);
        hvd_discovery_destroy(&d);
}
END_TEST

START_TEST(test_cpu_share) {
        cpu_set_t avail, s;
        CPU_ZERO(&avail);
        for (int c = 2; c < 10; c++) /* 8 CPUs, 2..9 */
                CPU_SET(c, &avail);
        /* 2 ranks: 4 CPUs each, in order, disjoint */
        ck_assert(hvd_cpu_share(&avail, 0, 2, &s));
        ck_assert_int_eq(CPU_COUNT(&s), 4);
        ck_assert(CPU_ISSET(2, &s) && CPU_ISSET(5, &s) && !CPU_ISSET(6, &s));
        ck_assert(hvd_cpu_share(&avail, 1, 2, &s));
        ck_assert_int_eq(CPU_COUNT(&s), 4);
        ck_assert(CPU_ISSET(6, &s) && CPU_ISSET(9, &s) && !CPU_ISSET(5, &s));
        /* 3 ranks: 2 CPUs each, the remainder unused */
        ck_assert(hvd_cpu_share(&avail, 2, 3, &s));
        ck_assert_int_eq(CPU_COUNT(&s), 2);
        ck_assert(CPU_ISSET(6, &s) && CPU_ISSET(7, &s));
        /* as many ranks as CPUs: one each */
        ck_assert(hvd_cpu_share(&avail, 7, 8, &s));
        ck_assert_int_eq(CPU_COUNT(&s), 1);
        ck_assert(CPU_ISSET(9, &s));
        /* more ranks than CPUs, one rank, a bad index: not bound, s untouched */
        CPU_ZERO(&s);
        CPU_SET(0, &s);
        ck_assert(!hvd_cpu_share(&avail, 0, 9, &s));
        ck_assert(!hvd_cpu_share(&avail, 0, 1, &s));
        ck_assert(!hvd_cpu_share(&avail, 2, 2, &s));
        ck_assert(CPU_ISSET(0, &s) && CPU_COUNT(&s) == 1);
        hvd_cpu_bind_t m = HVD_CPU_BIND_NONE;
        char why[128];
        ck_assert_int_eq(hvd_cpu_bind_parse("share", &m, why, sizeof why), 0);
        ck_assert_int_eq(m, HVD_CPU_BIND_SHARE);
        ck_assert_int_eq(hvd_cpu_bind_parse("none", &m, why, sizeof why), 0);
        ck_assert_int_eq(m, HVD_CPU_BIND_NONE);
        ck_assert_int_eq(hvd_cpu_bind_parse("core", &m, why, sizeof why), -EINVAL);
        ck_assert(strstr(why, "'core'") != NULL);
}
END_TEST

static Suite *launcher_suite(void) {
        Suite *s = suite_create("launcher");
        TCase *tc = tcase_create("launcher");
        tcase_add_test(tc, test_launch_mode);
        tcase_add_test(tc, test_alloc_hosts);
        tcase_add_test(tc, test_alloc_refusals);
        tcase_add_test(tc, test_srun_argv);
        tcase_add_test(tc, test_horovodrun_refusals);
        tcase_add_test(tc, test_discovery_parse);
        tcase_add_test(tc, test_elastic_opts);
        tcase_add_test(tc, test_discovery_offered);
        tcase_add_test(tc, test_cpu_share);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        SRunner *sr = srunner_create(launcher_suite());
        srunner_run_all(sr, CK_NORMAL);
        int failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
