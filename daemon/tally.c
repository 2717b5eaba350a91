/* tally.c — which contributors posted each cached id this round: a host's
 * local ranks (batch.c) or a relay's members (relay.c). An id every
 * contributor posted is complete and goes on as one id for all of them;
 * a round that waits too long is released, contributor by contributor,
 * so that the root's stall inspector can name who is missing. Only ids a
 * schedule showed to be of every contributor are tallied. */
#include "config.h"

#include "internal.h"

#define KNOWN 1 /* a schedule showed it of every contributor: it is tallied */
#define SPLIT 2 /* released this round: it goes contributor by contributor until its schedule passes */

int tally_init(tally_t *t, uint32_t n_parts) {
        hvd_assert(n_parts > 0);
        *t = (tally_t){ .n_parts = n_parts, .words = (n_parts + 63) / 64 };
        return 0;
}

void tally_free(tally_t *t) {
        free(t->bits);
        free(t->count);
        free(t->first_usec);
        free(t->flags);
        *t = (tally_t){ 0 };
}

/* The capacity of a table by cache id that holds id, from have: doubled
 * from 64; -E2BIG past the ids a message may carry. */
static int64_t id_capacity(uint32_t have, uint32_t id) {
        if (id >= HVD_WIRE_MAX_REQUESTS * 16)
                return -E2BIG;
        uint32_t n = have ? have : 64;
        while (n <= id)
                n *= 2;
        return n;
}

/* Makes room for id. Returns 0, -ENOMEM or -E2BIG (an id no message may
 * carry). */
static int tally_grow(tally_t *t, uint32_t id) {
        if (id < t->n_ids)
                return 0;
        int64_t cap = id_capacity(t->n_ids, id);
        if (cap < 0)
                return (int) cap;
        size_t n = (size_t) cap, old = t->n_ids;
        uint64_t *b = realloc(t->bits, n * t->words * sizeof *b);
        if (b)
                t->bits = b;
        uint32_t *c = realloc(t->count, n * sizeof *c);
        if (c)
                t->count = c;
        uint64_t *f = realloc(t->first_usec, n * sizeof *f);
        if (f)
                t->first_usec = f;
        uint8_t *fl = realloc(t->flags, n);
        if (fl)
                t->flags = fl;
        if (!b || !c || !f || !fl)
                return -ENOMEM;
        memset(t->bits + old * t->words, 0, (n - old) * t->words * sizeof *b);
        memset(t->count + old, 0, (n - old) * sizeof *c);
        memset(t->first_usec + old, 0, (n - old) * sizeof *f);
        memset(t->flags + old, 0, n - old);
        t->n_ids = (uint32_t) n;
        return 0;
}

static uint64_t *bits_of(const tally_t *t, uint32_t id) {
        return t->bits + (size_t) id * t->words;
}

int tally_learn(tally_t *t, uint32_t id, bool of_all) {
        int r = tally_grow(t, id);
        if (r < 0)
                return r;
        t->flags[id] = of_all ? KNOWN : 0;
        return 0;
}

void tally_unsplit(tally_t *t, uint32_t id) {
        if (id < t->n_ids)
                t->flags[id] &= (uint8_t) ~SPLIT;
}

bool tally_counts(const tally_t *t, uint32_t id) {
        return id < t->n_ids && t->flags[id] == KNOWN;
}

int tally_post(tally_t *t, uint32_t id, uint32_t part, uint64_t at, uint64_t now, uint64_t *waited) {
        hvd_assert(tally_counts(t, id) && part < t->n_parts);
        uint64_t *b = bits_of(t, id), bit = UINT64_C(1) << (part % 64);
        if (b[part / 64] & bit)
                return -EEXIST;
        if (!t->count[id] || at < t->first_usec[id])
                t->first_usec[id] = at;
        if (!t->oldest || t->first_usec[id] < t->oldest)
                t->oldest = t->first_usec[id];
        b[part / 64] |= bit;
        if (++t->count[id] < t->n_parts)
                return 0;
        *waited = now > t->first_usec[id] ? now - t->first_usec[id] : 0;
        t->count[id] = 0;
        memset(b, 0, t->words * sizeof *b);
        return 1;
}

bool tally_posted(const tally_t *t, uint32_t id, uint32_t part) {
        return id < t->n_ids && t->count[id] && (bits_of(t, id)[part / 64] >> (part % 64) & 1);
}

int tally_release(tally_t *t, uint64_t now, tally_release_fn fn, void *userdata) {
        if (!t->oldest)
                return 0;
        t->oldest = 0;
        uint32_t *ids = malloc((t->n_ids ? t->n_ids : 1) * sizeof *ids);
        uint64_t *waited = malloc((t->n_ids ? t->n_ids : 1) * sizeof *waited);
        int r = ids && waited ? 0 : -ENOMEM;
        for (uint32_t p = 0; r >= 0 && p < t->n_parts; p++) {
                size_t n = 0;
                for (uint32_t id = 0; id < t->n_ids; id++)
                        if (tally_posted(t, id, p)) {
                                ids[n] = id;
                                waited[n++] = now > t->first_usec[id] ? now - t->first_usec[id] : 0;
                        }
                if (n)
                        r = fn(userdata, p, ids, waited, n);
        }
        free(ids);
        free(waited);
        for (uint32_t id = 0; id < t->n_ids; id++)
                if (t->count[id]) {
                        t->count[id] = 0;
                        t->flags[id] |= SPLIT;
                        memset(bits_of(t, id), 0, t->words * sizeof(uint64_t));
                }
        return r;
}

bool tally_expired(tally_t *t, uint64_t now, uint64_t hold_usec) {
        uint64_t oldest = 0;
        for (uint32_t id = 0; id < t->n_ids; id++)
                if (t->count[id] && (!oldest || t->first_usec[id] < oldest))
                        oldest = t->first_usec[id];
        t->oldest = oldest;
        return oldest && now - oldest > hold_usec;
}

int tally_learn_schedule(tally_t *t, const Hvd__Schedule *s, const uint32_t *kept, uint32_t n_kept,
                         bool (*of_all)(const Hvd__Op *op, void *userdata), void *userdata) {
        if (s->repeat_key) {
                for (uint32_t i = 0; i < n_kept; i++)
                        tally_unsplit(t, kept[i]);
                return 0;
        }
        for (size_t o = 0; o < s->n_ops; o++) {
                bool all = of_all(s->ops[o], userdata);
                for (size_t e = 0; e < s->ops[o]->n_entries; e++) {
                        uint32_t id = s->ops[o]->entries[e]->id;
                        int r = id == HVD_NEGOTIATOR_NO_ID ? 0 : tally_learn(t, id, all);
                        if (r < 0)
                                return r;
                }
        }
        for (size_t i = 0; i < s->n_errors; i++)
                if (s->errors[i]->id != HVD_NEGOTIATOR_NO_ID)
                        tally_unsplit(t, s->errors[i]->id);
        return 0;
}
