/* slurm.c — fuzzes the Slurm list parsers (common/slurm_hostlist.c): the
 * input as a host list and as a task count list. Invariants: on success
 * exactly *n names, each non-empty, of name characters only, shorter than
 * 256 bytes, within the buffer and the count limit; counts 1..4096 with a
 * sum of at most 4096; a refusal always says why. */
#include "config.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "slurm_hostlist.h"

#define MAX_HOSTS 64
#define OUT_BYTES 4096

int LLVMFuzzerInitialize(int *argc, char ***argv) {
        return 0;
}

static void check_names(const char *out, size_t n) {
        size_t at = 0;
        for (size_t i = 0; i < n; i++) {
                size_t len = strnlen(out + at, OUT_BYTES - at);
                FUZZ_ASSERT(len > 0 && len < 256 && at + len < OUT_BYTES, "name %zu of length %zu", i, len);
                for (size_t k = 0; k < len; k++) {
                        char c = out[at + k];
                        FUZZ_ASSERT(isalnum((unsigned char) c) || c == '-' || c == '.' || c == '_',
                                    "character %d in a name", c);
                }
                at += len + 1;
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        char *list = malloc(size + 1);
        if (!list)
                return 0;
        memcpy(list, data, size);
        list[size] = 0;
        char out[OUT_BYTES], err[512] = "";
        size_t n = 0;
        int r = hvd_slurm_hostlist_expand(list, MAX_HOSTS, out, sizeof out, &n, err, sizeof err);
        FUZZ_ASSERT(r == 0 || err[0], "host list refused without a message (%d)", r);
        if (r == 0) {
                FUZZ_ASSERT(n >= 1 && n <= MAX_HOSTS, "%zu hosts", n);
                check_names(out, n);
        }
        uint32_t counts[MAX_HOSTS];
        err[0] = 0;
        r = hvd_slurm_tasks_expand(list, counts, MAX_HOSTS, &n, err, sizeof err);
        FUZZ_ASSERT(r == 0 || err[0], "task counts refused without a message (%d)", r);
        if (r == 0) {
                uint64_t sum = 0;
                FUZZ_ASSERT(n >= 1 && n <= MAX_HOSTS, "%zu counts", n);
                for (size_t i = 0; i < n; i++) {
                        FUZZ_ASSERT(counts[i] >= 1 && counts[i] <= HVD_SLURM_MAX_TASKS, "count %u", counts[i]);
                        sum += counts[i];
                }
                FUZZ_ASSERT(sum <= HVD_SLURM_MAX_TASKS, "sum %llu", (unsigned long long) sum);
        }
        free(list);
        return 0;
}
