/* main.c — tests/worker_collectives, the integration worker: run as N ranks
 * of one job (tests/lib/launch.sh -n N -- worker_collectives SCENARIO...), it
 * drives every collective of the public API (hvd.h only) with values whose
 * results are exactly representable, and checks every element, shape and
 * error message. Any difference prints "rank R: FAIL ..." and the exit status
 * is non-zero; "all" runs every scenario that needs no special setup (not
 * longrun*, early-shutdown, steady, stall-one, streamed, nor the flows notinit,
 * reinit and expect-init-error, which the test scripts start on their
 * own). This file
 * holds the table of scenarios by name and main, which runs those named on
 * the command line in order and reports each; the scenarios themselves are
 * in the other files of tests/worker/, declared in worker.h. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "worker.h"

/* ---- main ---- */

typedef struct scen {
        const char *name;
        void (*fn)(void);
        bool special; /* not part of "all": needs its own setup */
} scen_t;

static const scen_t scenarios[] = {
        { "api", scenario_api },
        { "bcast-null-input", scenario_bcast_null_input },
        { "allreduce", scenario_allreduce },
        { "same-bits", scenario_same_bits },
        { "grouped", scenario_grouped },
        { "shared", scenario_shared },
        { "shared-fused", scenario_shared_fused },
        { "staggered", scenario_staggered },
        { "broadcast", scenario_broadcast },
        { "allgather", scenario_allgather },
        { "alltoall", scenario_alltoall },
        { "reducescatter", scenario_reducescatter },
        { "barrier", scenario_barrier },
        { "join", scenario_join },
        { "many", scenario_many },
        { "threads", scenario_threads },
        { "edges", scenario_edges },
        { "resnet50", scenario_resnet50 },
        { "inception", scenario_inception },
        { "mismatch", scenario_mismatch },
        { "duplicate", scenario_duplicate },
        { "mismatch-retry", scenario_mismatch_retry },
        { "process-sets", scenario_process_sets },
        { "process-sets-grouped", scenario_process_sets_grouped },
        { "process-sets-same-name", scenario_process_sets_same_name },
        { "unique-names", scenario_unique_names },
        { "longrun", scenario_longrun, true },
        { "longrun-detached", scenario_longrun_detached, true },
        { "early-shutdown", scenario_early_shutdown, true },
        { "steady", scenario_steady, true },
        { "waiting", scenario_waiting },
        { "stall-one", scenario_stall_one, true },
        { "streamed", scenario_streamed, true },
};
#define N_SCEN (sizeof scenarios / sizeof scenarios[0])

/* With HVD_TEST_HOLD=PATH, the job stays alive after its scenarios until
 * PATH.go exists (rank 0 creates PATH.ready when all ranks are there), so a
 * test can inspect the daemon's status of a live job. */
static void hold(void) {
        const char *p = getenv("HVD_TEST_HOLD");
        if (!p || !*p)
                return;
        MUST(hvd_barrier());
        char path[1024];
        if (rank == 0) {
                snprintf(path, sizeof path, "%s.ready", p);
                FILE *f = fopen(path, "w");
                if (f)
                        fclose(f);
        }
        snprintf(path, sizeof path, "%s.go", p);
        for (int i = 0; i < 600 && access(path, F_OK) != 0; i++)
                usleep(50 * 1000);
        MUST(hvd_barrier());
}

int main(int argc, char **argv) {
        setvbuf(stdout, NULL, _IOLBF, 0);
        if (argc < 2) {
                fprintf(stderr,
                        "usage: %s SCENARIO... | all | notinit | expect-init-error CODE MAX_MS NEEDLE...\n"
                        "scenarios:",
                        argv[0]);
                for (size_t i = 0; i < N_SCEN; i++)
                        fprintf(stderr, " %s", scenarios[i].name);
                fprintf(stderr, "\n");
                return 2;
        }
        if (!strcmp(argv[1], "expect-init-error"))
                return flow_expect_init_error(argc - 2, argv + 2);
        if (!strcmp(argv[1], "notinit"))
                return flow_notinit();
        if (!strcmp(argv[1], "reinit"))
                return flow_reinit();

        uint64_t t_init = now_usec();
        int r = hvd_init();
        if (r < 0) {
                printf("rank %s: FAIL hvd_init: %s: %s\n", getenv("HVD_RANK") ? getenv("HVD_RANK") : "?", errname(r),
                       hvd_last_error());
                return 1;
        }
        rank = hvd_rank();
        size = hvd_size();
        if (rank == 0)
                printf("rank 0: job of %d ranks up in %.1f ms\n", size, (double) (now_usec() - t_init) / 1000.0);
        int ran = 0;
        for (int a = 1; a < argc; a++) {
                bool all = !strcmp(argv[a], "all"), found = false;
                for (size_t i = 0; i < N_SCEN; i++) {
                        if (!(all ? !scenarios[i].special : !strcmp(argv[a], scenarios[i].name)))
                                continue;
                        found = true;
                        scenario = scenarios[i].name;
                        int before = failures;
                        uint64_t t0 = now_usec();
                        scenarios[i].fn();
                        printf("rank %d: %s: %s (%.0f ms)\n", rank, scenario, failures == before ? "ok" : "FAILED",
                               (double) (now_usec() - t0) / 1000.0);
                        ran++;
                }
                if (!found) {
                        printf("rank %d: unknown scenario '%s'\n", rank, argv[a]);
                        failures++;
                }
        }
        scenario = "shutdown";
        hold();
        r = hvd_shutdown();
        CHECK(r == 0, "hvd_shutdown: %s", errname(r));
        if (failures)
                printf("rank %d: %d failure(s)\n", rank, failures);
        else
                printf("rank %d: all %d scenario(s) passed\n", rank, ran);
        return failures ? 1 : 0;
}
