/* shared_arena.h — this process's shared tensor memory (hvd_shared_alloc):
 * one memfd per process, reserved large and sparse and mapped once, which
 * the other local ranks map read-only through /proc/PID/fd/FD. An
 * allreduce whose tensors live here on every rank of a node reads the
 * others' inputs in place instead of copying them into the shared-memory
 * slots first (cpu_backend.c). */
#ifndef HVD_SHARED_ARENA_H
#define HVD_SHARED_ARENA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What another local rank needs to map this process's arena. */
typedef struct hvd_arena_id {
        int32_t pid;
        int32_t fd;
        uint64_t nonce; /* random per arena: a reused pid or fd is another arena */
        uint64_t bytes; /* reserved size of the mapping */
} hvd_arena_id_t;

/* True when [p, p + bytes) lies inside this process's arena; sets *offset
 * (from the arena's start) and *id. Lock-free: the data plane calls it for
 * every large allreduce. */
bool hvd_arena_find(const void *p, size_t bytes, uint64_t *offset, hvd_arena_id_t *id);

#endif
