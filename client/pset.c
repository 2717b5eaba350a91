/* pset.c — process sets: subsets of the job's ranks that run collectives
 * among themselves. Every rank makes the same calls in the same order
 * (an allreduce checks they agree), so ids match on every rank; a set
 * changes under G.lock and only between such calls. */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "util.h"

static void pset_free(hvd_pset_t *ps) {
        if (!ps)
                return;
        free(ps->ranks);
        free(ps->ranks_int);
        free(ps);
}

static int cmp_int(const void *a, const void *b) {
        int x = *(const int *) a, y = *(const int *) b;
        return (x > y) - (x < y);
}

/* Every rank passes the same values: checked with one MIN allreduce of
 * [v, -v], which yields min(v) and -max(v) together. */
static int agree(const char *what, const int32_t *v, size_t n) {
        int32_t *buf = malloc(2 * n * sizeof *buf);
        if (!buf)
                return hvd_error(-ENOMEM, "out of memory");
        for (size_t i = 0; i < n; i++) {
                buf[i] = v[i];
                buf[n + i] = -v[i];
        }
        char name[64];
        snprintf(name, sizeof name, "__hvd.pset.%u", ++G.pset_seq);
        int64_t shape[1] = { (int64_t) (2 * n) };
        hvd_request_t q = HVD_REQUEST_INIT;
        q.name = name;
        q.input = buf;
        q.output = buf;
        q.dtype = HVD_INT32;
        q.ndim = 1;
        q.shape = shape;
        q.reduce_op = HVD_REDUCE_MIN;
        int r = hvd_request_run(&q, HVD__KIND__KIND_ALLREDUCE, true, NULL);
        for (size_t i = 0; i < n && r >= 0; i++)
                if (buf[i] != v[i] || -buf[n + i] != v[i])
                        r = hvd_error(-EINVAL, "%s: the ranks passed different arguments", what);
        free(buf);
        return r;
}

int hvd_add_process_set(const int *ranks, size_t n) {
        if (!hvd_is_initialized())
                return hvd_error_not_initialized();
        if (!ranks || n == 0 || n > (size_t) G.size)
                return hvd_error(-EINVAL, "add_process_set: between 1 and %d ranks are needed", G.size);
        int *sorted = malloc(n * sizeof *sorted);
        int32_t *v = calloc((size_t) G.size + 1, sizeof *v);
        hvd_pset_t *ps = calloc(1, sizeof *ps);
        int r = 0;
        if (!sorted || !v || !ps) {
                r = hvd_error(-ENOMEM, "out of memory");
                goto out;
        }
        memcpy(sorted, ranks, n * sizeof *sorted);
        qsort(sorted, n, sizeof *sorted, cmp_int);
        for (size_t i = 0; i < n && r >= 0; i++) {
                if (sorted[i] < 0 || sorted[i] >= G.size)
                        r = hvd_error(-EINVAL, "add_process_set: rank %d out of range (size %d)", sorted[i], G.size);
                else if (i && sorted[i] == sorted[i - 1])
                        r = hvd_error(-EINVAL, "add_process_set: rank %d listed twice", sorted[i]);
        }
        if (r < 0)
                goto out;
        /* the set's members, padded: all ranks must agree */
        v[0] = (int32_t) n;
        for (size_t i = 0; i < n; i++)
                v[i + 1] = sorted[i];
        if ((r = agree("add_process_set", v, (size_t) G.size + 1)) < 0)
                goto out;
        pthread_mutex_lock(&G.lock);
        int id = 0;
        for (int k = 1; k < HVD_MAX_PROCESS_SETS && !id; k++)
                if (!G.psets[k])
                        id = k;
        /* an existing set with the same members is returned as it is (Horovod
         * refuses duplicates; the same members under one id keeps ids stable) */
        for (int k = 1; k < HVD_MAX_PROCESS_SETS; k++)
                if (G.psets[k] && G.psets[k]->n == (int) n &&
                    memcmp(G.psets[k]->ranks_int, sorted, n * sizeof(int)) == 0) {
                        pthread_mutex_unlock(&G.lock);
                        r = hvd_error(-EEXIST, "add_process_set: a process set with these ranks exists (id %d)", k);
                        goto out;
                }
        if (!id) {
                pthread_mutex_unlock(&G.lock);
                r = hvd_error(-ENOSPC, "add_process_set: at most %d process sets", HVD_MAX_PROCESS_SETS - 1);
                goto out;
        }
        ps->n = (int) n;
        ps->me = -1;
        ps->ranks = malloc(n * sizeof *ps->ranks);
        if (!ps->ranks) {
                pthread_mutex_unlock(&G.lock);
                r = hvd_error(-ENOMEM, "out of memory");
                goto out;
        }
        for (size_t i = 0; i < n; i++) {
                ps->ranks[i] = (uint32_t) sorted[i];
                if (sorted[i] == G.rank)
                        ps->me = (int) i;
        }
        ps->ranks_int = TAKE_PTR(sorted);
        G.psets[id] = TAKE_PTR(ps);
        pthread_mutex_unlock(&G.lock);
        r = id;
out:
        free(sorted);
        free(v);
        pset_free(ps);
        return r;
}

int hvd_remove_process_set(int id) {
        if (!hvd_is_initialized())
                return hvd_error_not_initialized();
        if (id <= 0 || id >= HVD_MAX_PROCESS_SETS || !G.psets[id])
                return hvd_error(-EINVAL, "remove_process_set: process set %d does not exist", id);
        int32_t v = id;
        int r = agree("remove_process_set", &v, 1);
        if (r < 0)
                return r;
        pthread_mutex_lock(&G.lock);
        pset_free(G.psets[id]);
        G.psets[id] = NULL;
        pthread_mutex_unlock(&G.lock);
        return 0;
}

int hvd_process_set_rank(int id) {
        if (!hvd_is_initialized())
                return HVD_ENOTINIT;
        if (id == 0)
                return G.rank;
        const hvd_pset_t *ps = hvd_pset_get(id);
        if (!ps)
                return -EINVAL;
        return ps->me >= 0 ? ps->me : -ENOENT;
}

int hvd_process_set_size(int id) {
        if (!hvd_is_initialized())
                return HVD_ENOTINIT;
        if (id == 0)
                return G.size;
        const hvd_pset_t *ps = hvd_pset_get(id);
        return ps ? ps->n : -EINVAL;
}

int hvd_process_set_included(int id) {
        if (!hvd_is_initialized())
                return HVD_ENOTINIT;
        if (id == 0)
                return 1;
        const hvd_pset_t *ps = hvd_pset_get(id);
        return ps ? ps->me >= 0 : -EINVAL;
}

int hvd_process_set_ranks(int id, const int **ranks, size_t *n) {
        if (!hvd_is_initialized())
                return HVD_ENOTINIT;
        if (!ranks || !n)
                return -EINVAL;
        const hvd_pset_t *ps = hvd_pset_get(id);
        if (!ps)
                return -EINVAL;
        *ranks = ps->ranks_int;
        *n = (size_t) ps->n;
        return 0;
}

void hvd_psets_clear(void) {
        for (int k = 0; k < HVD_MAX_PROCESS_SETS; k++) {
                pset_free(G.psets[k]);
                G.psets[k] = NULL;
        }
        G.pset_seq = 0;
}
