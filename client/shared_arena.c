/* shared_arena.c — hvd_shared_alloc / hvd_shared_free: tensors the other
 * local ranks read in place. The arena is one memfd, sized once to
 * ARENA_BYTES (sparse: pages exist only once touched) and mapped once, so
 * its start never moves and a peer maps it whole, once. Blocks are whole
 * pages, first fit; a freed block's pages are punched out of the file, so
 * its memory goes back to the system and every block starts zero-filled. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#include "hvd.h"
#include "shared_arena.h"

/* The most shared tensor memory one process can hold: address space only
 * (memfd pages are neither reserved nor committed until touched). */
#define ARENA_BYTES (UINT64_C(256) << 30)
#define PAGE_BYTES  UINT64_C(4096)

typedef struct block {
        uint64_t off, len;
} block_t;

typedef struct arena {
        uint8_t *base;
        hvd_arena_id_t id;
} arena_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static arena_t the_arena;          /* filled once, under lock */
static _Atomic(arena_t *) current; /* NULL until the first allocation */
static block_t *blocks;            /* sorted by offset, under lock */
static size_t n_blocks, cap_blocks;

/* A forked child shares the parent's mapping (MAP_SHARED): it must not
 * allocate from it. It starts an arena of its own when it allocates. */
static void forget_in_child(void) {
        atomic_store(&current, NULL);
        blocks = NULL;
        n_blocks = cap_blocks = 0;
        pthread_mutex_init(&lock, NULL);
}

static int arena_open(void) {
        static bool atfork_done;
        if (!atfork_done) {
                pthread_atfork(NULL, NULL, forget_in_child);
                atfork_done = true;
        }
        int fd = memfd_create("hvd-shared-tensors", MFD_CLOEXEC);
        if (fd < 0)
                return -errno;
        if (ftruncate(fd, (off_t) ARENA_BYTES) < 0) {
                int r = -errno;
                close(fd);
                return r;
        }
        void *p = mmap(NULL, ARENA_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
        if (p == MAP_FAILED) {
                int r = -errno;
                close(fd);
                return r;
        }
        uint64_t nonce = 0;
        if (getrandom(&nonce, sizeof nonce, GRND_NONBLOCK) != (ssize_t) sizeof nonce)
                nonce = (uint64_t) (uintptr_t) p ^ ((uint64_t) getpid() << 32);
        the_arena =
                (arena_t){ .base = p,
                           .id = { .pid = (int32_t) getpid(), .fd = fd, .nonce = nonce | 1, .bytes = ARENA_BYTES } };
        atomic_store_explicit(&current, &the_arena, memory_order_release);
        return 0;
}

/* The first gap of len bytes: its offset and the index a block there takes. */
static bool first_fit(uint64_t len, uint64_t *off, size_t *at) {
        uint64_t start = 0;
        for (size_t i = 0; i <= n_blocks; i++) {
                uint64_t end = i < n_blocks ? blocks[i].off : ARENA_BYTES;
                if (end - start >= len) {
                        *off = start;
                        *at = i;
                        return true;
                }
                if (i < n_blocks)
                        start = blocks[i].off + blocks[i].len;
        }
        return false;
}

int hvd_shared_alloc(size_t bytes, void **ptr) {
        if (!ptr)
                return -EINVAL;
        *ptr = NULL;
        if (bytes > ARENA_BYTES)
                return -ENOMEM;
        uint64_t len = bytes ? ((uint64_t) bytes + PAGE_BYTES - 1) & ~(PAGE_BYTES - 1) : PAGE_BYTES;
        pthread_mutex_lock(&lock);
        int r = 0;
        if (!atomic_load_explicit(&current, memory_order_acquire))
                r = arena_open();
        uint64_t off = 0;
        size_t at = 0;
        if (r == 0 && !first_fit(len, &off, &at))
                r = -ENOMEM;
        if (r == 0 && n_blocks == cap_blocks) {
                size_t cap = cap_blocks ? 2 * cap_blocks : 64;
                block_t *nb = realloc(blocks, cap * sizeof *nb);
                if (!nb)
                        r = -ENOMEM;
                else {
                        blocks = nb;
                        cap_blocks = cap;
                }
        }
        if (r == 0) {
                memmove(blocks + at + 1, blocks + at, (n_blocks - at) * sizeof *blocks);
                blocks[at] = (block_t){ off, len };
                n_blocks++;
                *ptr = the_arena.base + off;
        }
        pthread_mutex_unlock(&lock);
        return r;
}

int hvd_shared_free(void *ptr) {
        if (!ptr)
                return 0;
        arena_t *a = atomic_load_explicit(&current, memory_order_acquire);
        if (!a || (uint8_t *) ptr < a->base || (uint8_t *) ptr >= a->base + a->id.bytes)
                return -EINVAL;
        uint64_t off = (uint64_t) ((uint8_t *) ptr - a->base);
        pthread_mutex_lock(&lock);
        size_t lo = 0, hi = n_blocks;
        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                if (blocks[mid].off < off)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        if (lo == n_blocks || blocks[lo].off != off) {
                pthread_mutex_unlock(&lock);
                return -EINVAL;
        }
        uint64_t len = blocks[lo].len;
        memmove(blocks + lo, blocks + lo + 1, (n_blocks - lo - 1) * sizeof *blocks);
        n_blocks--;
        /* the pages go back to the system, and the next block here starts
         * zero-filled; where the kernel cannot punch holes, zeros are
         * written */
        if (fallocate(a->id.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t) off, (off_t) len) < 0)
                memset(ptr, 0, len);
        pthread_mutex_unlock(&lock);
        return 0;
}

bool hvd_arena_find(const void *p, size_t bytes, uint64_t *offset, hvd_arena_id_t *id) {
        arena_t *a = atomic_load_explicit(&current, memory_order_acquire);
        if (!a || !p)
                return false;
        const uint8_t *q = p;
        if (q < a->base || q >= a->base + a->id.bytes || bytes > (size_t) (a->base + a->id.bytes - q))
                return false;
        *offset = (uint64_t) (q - a->base);
        *id = a->id;
        return true;
}
