/* bench_negotiate.c — the root daemon's negotiation table alone
 * (common/negotiate.c), no messages: RANKS ranks on NODES nodes enter a
 * model's first step by name, each request shared by GROUP ranks (1: rank
 * by rank; a host's ranks; a relay's group of hosts), then the schedule is
 * built; then the steady state, every node's cached ids node by node. This
 * is the part of a cold step's cost at the root that grows with ranks ×
 * tensors. One line per measurement, medians of --rounds fresh tables:
 *   bench=negotiate ranks=.. nodes=.. group=.. tensors=.. cold_submit_ms=..
 *   cold_take_ms=.. steady_submit_ms=.. steady_take_ms=.. */
#include "config.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "negotiate.h"
#include "step_model.h"

static int cmp_double(const void *a, const void *b) {
        double x = *(const double *) a, y = *(const double *) b;
        return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
        qsort(v, (size_t) n, sizeof *v, cmp_double);
        return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv) {
        const char *tsv = NULL;
        uint32_t size = 1024, nodes = 64;
        int rounds = 5;
        char groups_arg[256] = "1,16,128";
        static const struct option opts[] = {
                { "model", required_argument, NULL, 'm' },
                { "ranks", required_argument, NULL, 'r' },
                { "nodes", required_argument, NULL, 'k' },
                { "groups", required_argument, NULL, 'g' },
                { "rounds", required_argument, NULL, 'n' },
                { "help", no_argument, NULL, 'h' },
                {},
        };
        int c;
        while ((c = getopt_long(argc, argv, "m:r:k:g:n:h", opts, NULL)) >= 0) {
                switch (c) {
                case 'm': tsv = optarg; break;
                case 'r': size = (uint32_t) atoi(optarg); break;
                case 'k': nodes = (uint32_t) atoi(optarg); break;
                case 'g': snprintf(groups_arg, sizeof groups_arg, "%s", optarg); break;
                case 'n': rounds = atoi(optarg); break;
                default:
                        printf("usage: bench_negotiate --model FILE.tsv [--ranks N] [--nodes K] [--groups 1,16,128]\n"
                               "       [--rounds N]\n"
                               "The negotiation table alone: N ranks on K nodes enter a model's first step, each\n"
                               "request shared by a group of ranks, and its steady state node by node.\n");
                        return c == 'h' ? 0 : 2;
                }
        }
        if (!tsv || size < 1 || nodes < 1 || size % nodes || rounds < 1 || rounds > 1000) {
                fprintf(stderr, "bench: --model is required; --ranks a multiple of --nodes\n");
                return 2;
        }
        step_model_t m;
        if (step_model_load(tsv, &m) < 0)
                return 1;
        Hvd__Request *reqs = calloc(m.n, sizeof *reqs);
        Hvd__Request **rp = calloc(m.n, sizeof *rp);
        uint32_t *ids = calloc(m.n, sizeof *ids), *of = calloc(size, sizeof *of), *ranks = calloc(size, sizeof *ranks);
        double *t[4];
        for (int k = 0; k < 4; k++)
                t[k] = calloc((size_t) rounds, sizeof *t[k]);
        if (!reqs || !rp || !ids || !of || !ranks || !t[0] || !t[1] || !t[2] || !t[3])
                return 1;
        for (size_t k = 0; k < m.n; k++) {
                Hvd__Request *q = &reqs[k];
                hvd__request__init(q);
                q->name = m.t[k].name;
                q->kind = HVD__KIND__KIND_ALLREDUCE;
                q->dtype = 6; /* HVD_FLOAT32 */
                q->n_shape = (size_t) m.t[k].ndim;
                q->shape = (int64_t *) m.t[k].shape;
                q->reduce_op = 1; /* HVD_REDUCE_SUM */
                q->prescale = q->postscale = 1.0;
                q->device = -1;
                rp[m.n - 1 - k] = q; /* backward order */
        }
        for (uint32_t r = 0; r < size; r++)
                of[r] = r / (size / nodes);
        Hvd__Ready ready = HVD__READY__INIT;
        ready.requests = rp;
        ready.n_requests = m.n;
        char err[512];
        int status = 0;
        for (char *save = NULL, *g = strtok_r(groups_arg, ",", &save); g && !status; g = strtok_r(NULL, ",", &save)) {
                uint32_t group = (uint32_t) atoi(g);
                if (group < 1 || size % group) {
                        fprintf(stderr, "bench: group %s does not divide %u ranks\n", g, size);
                        status = 2;
                        break;
                }
                for (int round = 0; round < rounds && !status; round++) {
                        hvd_negotiator_t *n = NULL;
                        if (hvd_negotiator_new(size, 65536, 64 << 20, &n) < 0 ||
                            hvd_negotiator_set_nodes(n, nodes, of) < 0) {
                                status = 1;
                                break;
                        }
                        double t0 = step_now_sec();
                        for (uint32_t first = 0; first < size && !status; first += group) {
                                for (uint32_t k = 0; k < group; k++)
                                        ranks[k] = first + k;
                                if (hvd_negotiator_submit_ranks(n, ranks, group, &ready, err, sizeof err) < 0) {
                                        fprintf(stderr, "bench: %s\n", err);
                                        status = 1;
                                }
                        }
                        double t1 = step_now_sec();
                        Hvd__Schedule *s = NULL;
                        size_t got = 0;
                        while (!status && hvd_negotiator_take_schedule(n, &s) > 0) {
                                for (size_t o = 0; o < s->n_ops; o++)
                                        for (size_t e = 0; e < s->ops[o]->n_entries; e++) {
                                                const Hvd__Entry *en = s->ops[o]->entries[e];
                                                for (size_t k = 0; k < m.n; k++)
                                                        if (!strcmp(rp[k]->name, en->name))
                                                                ids[k] = en->id;
                                                got++;
                                        }
                                hvd_negotiator_schedule_free(&s);
                        }
                        double t2 = step_now_sec();
                        if (!status && got != m.n) {
                                fprintf(stderr, "bench: the schedule held %zu of %zu tensors\n", got, m.n);
                                status = 1;
                        }
                        for (uint32_t node = 0; node < nodes && !status; node++)
                                if (hvd_negotiator_submit_node(n, node, ids, m.n, NULL, err, sizeof err) < 0) {
                                        fprintf(stderr, "bench: %s\n", err);
                                        status = 1;
                                }
                        double t3 = step_now_sec();
                        while (!status && hvd_negotiator_take_schedule(n, &s) > 0)
                                hvd_negotiator_schedule_free(&s);
                        double t4 = step_now_sec();
                        t[0][round] = (t1 - t0) * 1e3;
                        t[1][round] = (t2 - t1) * 1e3;
                        t[2][round] = (t3 - t2) * 1e3;
                        t[3][round] = (t4 - t3) * 1e3;
                        hvd_negotiator_destroy(&n);
                }
                if (!status)
                        printf("bench=negotiate ranks=%u nodes=%u group=%u tensors=%zu cold_submit_ms=%.3f "
                               "cold_take_ms=%.3f steady_submit_ms=%.3f steady_take_ms=%.3f\n",
                               size, nodes, group, m.n, median(t[0], rounds), median(t[1], rounds),
                               median(t[2], rounds), median(t[3], rounds));
        }
        for (int k = 0; k < 4; k++)
                free(t[k]);
        free(reqs);
        free(rp);
        free(ids);
        free(of);
        free(ranks);
        step_model_free(&m);
        return status;
}
