/* worker.h — what the files of the integration worker (tests/worker_collectives)
 * share: the job as the scenarios see it (rank, size, failures, the scenario
 * running), the reporting helpers and the MUST and CHECK macros every check
 * goes through, the element access that lets one generator function fill and
 * check buffers of any dtype (common.c), and the scenarios and flows that
 * main.c runs by name, each declared with the file that holds it. */
#ifndef HVD_TESTS_WORKER_H
#define HVD_TESTS_WORKER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "hvd.h"

/* ---- common.c: the job, reporting ---- */

/* this process's rank and the job's size: -1 until main or a flow sets them */
extern int rank, size;
/* the failures counted so far (fail, CHECK, unknown scenarios) */
extern int failures;
/* the scenario running, named in every failure line */
extern const char *scenario;

/* A call that must succeed; on failure the process exits (without
 * hvd_shutdown: the daemon then aborts the job, so no rank hangs). */
#define MUST(call)                                                                                                     \
        do {                                                                                                           \
                int _r = (call);                                                                                       \
                if (_r < 0) {                                                                                          \
                        printf("rank %d: FAIL [%s] %s:%d: %s returned %s: %s\n", rank, scenario, __FILE__, __LINE__,   \
                               #call, errname(_r), hvd_last_error());                                                  \
                        exit(1);                                                                                       \
                }                                                                                                      \
        } while (0)

#define CHECK(cond, ...)                                                                                               \
        do {                                                                                                           \
                if (!(cond))                                                                                           \
                        fail(__VA_ARGS__);                                                                             \
        } while (0)

/* the monotonic clock, in microseconds */
uint64_t now_usec(void);
/* the name of an hvd error code ("HVD_EMISMATCH"), else the number and its strerror */
const char *errname(int e);
/* prints "rank R: FAIL [scenario] ..." and counts it; more than 50 failures exit */
void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* malloc that exits when out of memory (and allocates a byte for 0) */
void *xmalloc(size_t n);
/* waits for a handle, at most 60 s (then exits), and returns its status */
int wait_h(hvd_handle_t *h, const char *what);
/* waits for a handle that must succeed (else exits), then checks its poll and error text */
void wait_ok(hvd_handle_t *h, const char *what);
/* the directory for a test's files: HVD_TEST_TMPDIR, else /tmp */
const char *tmpdir(void);

/* ---- common.c: element access ---- */

/* element i of a buffer of dtype dt, as a double */
double get_elem(hvd_dtype_t dt, const void *p, size_t i);
/* stores v as element i of a buffer of dtype dt */
void set_elem(hvd_dtype_t dt, void *p, size_t i, double v);
/* float16, bfloat16, float32 or float64 */
bool is_float(hvd_dtype_t dt);
/* uint8 or bool */
bool is_unsigned(hvd_dtype_t dt);

/* the value of element i, from what ctx describes */
typedef double (*gen_fn)(const void *ctx, size_t i);

/* checks n elements of buf against gen(ctx, i); returns how many differ */
size_t compare(const char *what, hvd_dtype_t dt, const void *buf, size_t n, gen_fn gen, const void *ctx);
/* a new buffer (xmalloc) of n elements gen(ctx, i) */
void *make_buf(hvd_dtype_t dt, size_t n, gen_fn gen, const void *ctx);
/* sets n elements of p to v */
void fill(hvd_dtype_t dt, void *p, size_t n, double v);

/* ---- allreduce.c ---- */

/* every dtype x op x size at once, synchronous, scaled, large and mid sizes */
void scenario_allreduce(void);
void scenario_streamed(void);
/* floating-point allreduces whose result depends on the order of the ranks: the same bits everywhere */
void scenario_same_bits(void);
/* shared tensors (hvd_shared_alloc): the allocator, the zero-copy path and the usual one */
void scenario_shared(void);
/* shared tensors below the zero-copy threshold, fused in one group */
void scenario_shared_fused(void);
/* grouped allreduces of mixed dtypes, ops and sizes under one handle */
void scenario_grouped(void);
/* the same new names, submitted at once by local rank 0 and one by one by the others */
void scenario_staggered(void);
/* 300 small tensors in flight at once, three rounds */
void scenario_many(void);
/* two steps of ResNet-50's gradients (shared/data/resnet50.tsv) */
void scenario_resnet50(void);
/* two steps of Inception v3's gradients (shared/data/inception_v3.tsv) */
void scenario_inception(void);

/* ---- streams.c ---- */

/* broadcast from every root: dtypes, sizes, in place, scalars, large tensors */
void scenario_broadcast(void);
/* allgather of uneven rows, grouped allgather */
void scenario_allgather(void);
/* alltoall with uneven, even and one-sided splits, large; bad splits refused */
void scenario_alltoall(void);
/* reducescatter of rows that do not divide evenly, grouped reducescatter */
void scenario_reducescatter(void);

/* ---- control.c ---- */

/* barrier ordering (marker files) and barriers among async work */
void scenario_barrier(void);
/* ranks that join after different numbers of steps, twice */
void scenario_join(void);
/* several user threads submitting and waiting at once */
void scenario_threads(void);
/* process sets of the even and odd ranks: queries, collectives, misuse */
void scenario_process_sets(void);
/* grouped allreduces inside a set and over the whole job */
void scenario_process_sets_grouped(void);
/* two disjoint sets reducing tensors of the same name */
void scenario_process_sets_same_name(void);

/* ---- contract.c ---- */

/* per-rank dtypes, shapes, ops and roots: HVD_EMISMATCH with its message */
void scenario_mismatch(void);
/* a name that failed with a mismatch, submitted again consistently */
void scenario_mismatch_retry(void);
/* duplicate names in a group and in flight, detached handles, invalid names */
void scenario_duplicate(void);
/* the edge cases of a request: names, dimensions, refused arguments, empty tensors */
void scenario_edges(void);
/* topology and the small API: dtypes, error strings, version, request defaults */
void scenario_api(void);
/* a broadcast whose non-root ranks pass no input */
void scenario_bcast_null_input(void);
/* a new tensor name on every step, more than the daemon's table holds */
void scenario_unique_names(void);

/* ---- flows.c ---- */

/* allreduces for up to 60 s, until a test kills a rank or the daemon */
void scenario_longrun(void);
/* rank 0 shuts down; the others' next collective fails naming it */
void scenario_early_shutdown(void);
/* longrun with every handle released at once */
void scenario_longrun_detached(void);
/* HVD_TEST_STEPS steps of the same 15 tensors, exact */
void scenario_steady(void);
void scenario_waiting(void);
/* one rank stays away from a round: the stall shutdown ends the others' wait */
void scenario_stall_one(void);
/* expect-init-error CODE MAX_MS NEEDLE...: hvd_init fails as expected; the exit status */
int flow_expect_init_error(int argc, char **argv);
/* the API before hvd_init and after hvd_shutdown; the exit status */
int flow_notinit(void);
/* hvd_init, work, hvd_shutdown, twice in one process; the exit status */
int flow_reinit(void);

#endif
