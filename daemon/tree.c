/* tree.c — the relay tree of a large job: the root places its other
 * hosts under relays so that no daemon hears from more than relay_fanout
 * hosts; every daemon reads the tree (relay_via) the root's welcome
 * carries. Host 0 is the root and never in the tree. */
#include "config.h"

#include "internal.h"

/* Root: hosts[0..n) (cross ranks, in order) report to parent (0: the
 * root), which hears from at most cap of them. More are cut into runs as
 * even as can be: ceil(n / g) runs of at most g hosts when that makes at
 * most cap of them (each run's relay hears from the rest of it), else cap
 * runs, each placed below its relay the same way (at most g a relay). A
 * run's relay is its first host that gave an endpoint; a relay whose
 * parent is the root names itself. Returns the relays made (UINT32_MAX:
 * out of memory). */
static uint32_t relay_tree(job_t *j, const uint32_t *hosts, uint32_t n, uint32_t parent, uint32_t g, uint32_t cap,
                           uint32_t depth) {
        if (n <= cap) {
                for (uint32_t k = 0; k < n; k++)
                        j->relay_via[hosts[k]] = parent;
                return 0;
        }
        uint32_t runs = (n + g - 1) / g;
        if (runs > cap)
                runs = cap;
        uint32_t made = 0;
        for (uint32_t part = 0, first = 0; part < runs; part++) {
                uint32_t len = n / runs + (part < n % runs), relay = UINT32_MAX;
                hvd_assert(first + len <= n); /* the runs cut hosts[0..n) */
                for (uint32_t k = first; k < first + len && relay == UINT32_MAX; k++)
                        if (j->nodes[hosts[k]].endpoint)
                                relay = k;
                if (relay == UINT32_MAX || len < 2) { /* no one can relay: straight to the parent */
                        for (uint32_t k = first; k < first + len; k++)
                                j->relay_via[hosts[k]] = parent;
                } else {
                        uint32_t r = hosts[relay];
                        j->relay_via[r] = parent ? parent : r;
                        if (depth + 1 > j->relay_depth)
                                j->relay_depth = depth + 1;
                        /* the run without its relay, in order */
                        uint32_t *rest = calloc(len - 1, sizeof *rest); /* zeroed, as hosts */
                        if (!rest)
                                return UINT32_MAX;
                        memcpy(rest, hosts + first, (relay - first) * sizeof *rest);
                        memcpy(rest + (relay - first), hosts + relay + 1, (first + len - relay - 1) * sizeof *rest);
                        uint32_t sub = relay_tree(j, rest, len - 1, r, g, g, depth + 1);
                        free(rest);
                        if (sub == UINT32_MAX)
                                return UINT32_MAX;
                        made += 1 + sub;
                }
                first += len;
        }
        return made;
}

/* Root: places the other hosts of a large job in a tree of relays in which
 * no relay hears from more than relay_fanout hosts, and the root, which
 * also negotiates, from at most a quarter as many (at least 2; the first
 * host of a group
 * that gave an endpoint relays for it); fills j->relay_via. Returns 0 (no
 * relays: j->relay_via stays NULL) or -ENOMEM. */
int tree_assign(hvd_daemon_t *d, job_t *j) {
        uint32_t g = d->cfg.relay_fanout, n = j->cross_size - 1; /* every host but the root */
        if (g < 2 || n <= g || hvd_zap_curve(d->zap))
                return 0;
        uint32_t *hosts = calloc(n, sizeof *hosts); /* zeroed: the analyzer cannot follow the fill */
        if (!hosts || !(j->relay_via = calloc(n + 1, sizeof *j->relay_via))) {
                free(hosts);
                return -ENOMEM;
        }
        for (uint32_t k = 0; k < n; k++)
                hosts[k] = k + 1;
        j->relay_depth = 0;
        uint32_t relays = relay_tree(j, hosts, n, 0, g, HVD_MAX(2u, g / 4), 0);
        free(hosts);
        if (relays == UINT32_MAX || !relays) {
                free(j->relay_via);
                j->relay_via = NULL;
                return relays ? -ENOMEM : 0;
        }
        uint32_t top = 0;
        for (uint32_t c = 1; c < j->cross_size; c++)
                top += j->relay_via[c] == c;
        if (j->relay_depth > 1)
                snprintf(j->relay_desc, sizeof j->relay_desc,
                         "%u hosts report through %u relay daemons in %u levels (%u under the root, at most %u hosts "
                         "a relay)",
                         j->cross_size - 1, relays, j->relay_depth, top, g);
        else
                snprintf(j->relay_desc, sizeof j->relay_desc,
                         "%u hosts report through %u relay daemons (%u hosts a group)", j->cross_size - 1, relays, g);
        hvd_log_info("job %s: %s", j->id, j->relay_desc);
        return 0;
}

/* The host that host c reports to with relays (0: the root). */
uint32_t tree_parent(const job_t *j, uint32_t c) {
        return j->relay_via[c] == c ? 0 : j->relay_via[c];
}

/* Whether host h is relay r or reports through it, however deep. */
bool tree_under(const job_t *j, uint32_t h, uint32_t r) {
        for (uint32_t steps = 0; h && steps < j->cross_size; steps++, h = tree_parent(j, h))
                if (h == r)
                        return true;
        return false;
}

int tree_take(job_t *j, const Hvd__NodeWelcome *nw, uint32_t *n_members) {
        uint32_t me = j->cross_rank, n = 1;
        bool ok = nw->n_relay_via == j->cross_size && nw->relay_via[0] == 0;
        for (uint32_t c = 1; ok && c < j->cross_size; c++) {
                uint32_t v = nw->relay_via[c];
                /* a relay has an endpoint; one that is not its own names a relay */
                ok = v < j->cross_size && (!v || nw->relay_endpoint[v][0]) && (v == c || !v || nw->relay_via[v]);
                n += v == me && c != me;
        }
        if (!ok || n > 64)
                return -EPROTO;
        if (!(j->relay_via = malloc(j->cross_size * sizeof *j->relay_via)))
                return -ENOMEM;
        memcpy(j->relay_via, nw->relay_via, j->cross_size * sizeof *j->relay_via);
        /* every host reaches the root */
        for (uint32_t c = 1; ok && c < j->cross_size; c++) {
                uint32_t h = c, steps = 0;
                while (h && steps++ < j->cross_size)
                        h = tree_parent(j, h);
                ok = h == 0;
        }
        if (!ok) {
                free(j->relay_via);
                j->relay_via = NULL;
                return -EPROTO;
        }
        *n_members = n;
        return 0;
}
