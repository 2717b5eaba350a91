/* strmap.c — open addressing with linear probing and tombstones; the table
 * doubles at 70% load (tombstones count), so lookups stay O(1). */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "strmap.h"

typedef struct {
        char *key; /* NULL = empty; TOMB = deleted */
        size_t key_len;
        uint64_t hash;
        void *value;
} slot_t;

struct hvd_strmap {
        slot_t *slots;
        size_t cap, used, live;
};

static char tomb_marker;
#define TOMB (&tomb_marker)

#ifdef __SIZEOF_INT128__
/* 64 x 64 -> 128 bits, folded: the mixing step of wyhash */
static inline uint64_t mix(uint64_t a, uint64_t b) {
        __uint128_t r = (__uint128_t) a * b;
        return (uint64_t) r ^ (uint64_t) (r >> 64);
}

static inline uint64_t rd64(const unsigned char *p) {
        uint64_t v;
        memcpy(&v, p, sizeof v);
        return v;
}

/* 16 bytes a step: tensor names and the requests the daemon's memo keys
 * by are 20 to 100 bytes, which a byte at a time costs 3 to 4 cycles each */
static uint64_t hash_bytes(const void *key, size_t len) {
        const unsigned char *p = key;
        const uint64_t k0 = UINT64_C(0xa0761d6478bd642f), k1 = UINT64_C(0xe7037ed1a0b428db),
                       k2 = UINT64_C(0x8ebc6af09c88c6e3);
        uint64_t h = mix((uint64_t) len ^ k0, k1);
        size_t n = len;
        for (; n >= 16; p += 16, n -= 16)
                h = mix(rd64(p) ^ k1, rd64(p + 8) ^ h);
        uint64_t a = 0, b = 0;
        if (n >= 8) {
                a = rd64(p);
                p += 8;
                n -= 8;
        }
        memcpy(&b, p, n);
        return mix(a ^ h ^ k2, b ^ k1 ^ (uint64_t) n);
}
#else
static uint64_t hash_bytes(const void *key, size_t len) { /* FNV-1a */
        const unsigned char *p = key;
        uint64_t h = UINT64_C(1469598103934665603);
        for (size_t i = 0; i < len; i++) {
                h ^= p[i];
                h *= UINT64_C(1099511628211);
        }
        return h ^ (h >> 29);
}
#endif

hvd_strmap_t *hvd_strmap_new(void) {
        hvd_strmap_t *m = calloc(1, sizeof *m);
        if (!m)
                return NULL;
        m->cap = 16;
        m->slots = calloc(m->cap, sizeof *m->slots);
        if (!m->slots) {
                free(m);
                return NULL;
        }
        return m;
}

void hvd_strmap_destroy(hvd_strmap_t **mp) {
        if (!mp || !*mp)
                return;
        hvd_strmap_t *m = *mp;
        for (size_t i = 0; i < m->cap; i++)
                if (m->slots[i].key && m->slots[i].key != TOMB)
                        free(m->slots[i].key);
        free(m->slots);
        free(m);
        *mp = NULL;
}

static slot_t *find(const hvd_strmap_t *m, const void *key, size_t len, uint64_t h) {
        for (size_t i = h & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
                slot_t *s = &m->slots[i];
                if (!s->key)
                        return NULL;
                if (s->key != TOMB && s->hash == h && s->key_len == len && memcmp(s->key, key, len) == 0)
                        return s;
        }
}

static int grow(hvd_strmap_t *m) {
        size_t ncap = m->live * 2 >= m->cap / 2 ? m->cap * 2 : m->cap;
        slot_t *ns = calloc(ncap, sizeof *ns);
        if (!ns)
                return -ENOMEM;
        for (size_t i = 0; i < m->cap; i++) {
                slot_t *s = &m->slots[i];
                if (!s->key || s->key == TOMB)
                        continue;
                size_t j = s->hash & (ncap - 1);
                while (ns[j].key)
                        j = (j + 1) & (ncap - 1);
                ns[j] = *s;
        }
        free(m->slots);
        m->slots = ns;
        m->cap = ncap;
        m->used = m->live;
        return 0;
}

int hvd_strmap_put(hvd_strmap_t *m, const void *key, size_t len, void *value) {
        uint64_t h = hash_bytes(key, len);
        slot_t *s = find(m, key, len, h);
        if (s) {
                s->value = value;
                return 0;
        }
        if ((m->used + 1) * 10 >= m->cap * 7 && grow(m) < 0)
                return -ENOMEM;
        char *k = malloc(len + 1);
        if (!k)
                return -ENOMEM;
        memcpy(k, key, len);
        k[len] = 0;
        size_t i = h & (m->cap - 1);
        while (m->slots[i].key && m->slots[i].key != TOMB)
                i = (i + 1) & (m->cap - 1);
        if (!m->slots[i].key)
                m->used++;
        m->slots[i] = (slot_t){ .key = k, .key_len = len, .hash = h, .value = value };
        m->live++;
        return 0;
}

void *hvd_strmap_get(const hvd_strmap_t *m, const void *key, size_t len) {
        slot_t *s = find(m, key, len, hash_bytes(key, len));
        return s ? s->value : NULL;
}

void *hvd_strmap_remove(hvd_strmap_t *m, const void *key, size_t len) {
        slot_t *s = find(m, key, len, hash_bytes(key, len));
        if (!s)
                return NULL;
        void *v = s->value;
        free(s->key);
        s->key = TOMB;
        s->value = NULL;
        m->live--;
        return v;
}

size_t hvd_strmap_size(const hvd_strmap_t *m) {
        return m->live;
}

int hvd_strmap_next(const hvd_strmap_t *m, size_t *iter, const void **key, size_t *key_len, void **value) {
        for (size_t i = *iter; i < m->cap; i++) {
                slot_t *s = &m->slots[i];
                if (s->key && s->key != TOMB) {
                        if (key)
                                *key = s->key;
                        if (key_len)
                                *key_len = s->key_len;
                        if (value)
                                *value = s->value;
                        *iter = i + 1;
                        return 1;
                }
        }
        *iter = m->cap;
        return 0;
}
