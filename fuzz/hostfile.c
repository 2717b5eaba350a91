/* hostfile.c — fuzzes hvdrun's host list parsers (tools/hostlist.c): the -H
 * list and the --hostfile lines ("host slots=N", "host:N", "[v6addr]:N",
 * comments), the same input given to both. Invariants: at most
 * HVD_HOSTLIST_MAX_SLOTS slots in total; every entry with a non-empty name
 * that neither starts with '-' nor holds a ',', and at least one slot; a
 * refusal always says why. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz.h"
#include "hostlist.h"

static int memfd = -1;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
        return 0;
}

static void check(const hvd_hostlist_t *l, int r, const char *err) {
        long sum = 0;
        for (size_t i = 0; i < l->n; i++) {
                const char *name = l->v[i].name;
                FUZZ_ASSERT(name && name[0] && name[0] != '-' && !strchr(name, ',') &&
                                    strlen(name) < HVD_HOSTLIST_NAME_BYTES,
                            "bad host name accepted");
                FUZZ_ASSERT(l->v[i].slots >= 1, "host with %ld slots", l->v[i].slots);
                sum += l->v[i].slots;
        }
        FUZZ_ASSERT(sum == l->total_slots && sum <= HVD_HOSTLIST_MAX_SLOTS, "slot count %ld / %ld", sum,
                    l->total_slots);
        FUZZ_ASSERT(r == 0 || err[0], "refused without a message (%d)", r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        char *list = malloc(size + 1);
        if (!list)
                return 0;
        memcpy(list, data, size);
        list[size] = 0;
        hvd_hostlist_t l = { 0 };
        char err[4096] = "";
        int r = hvd_hostlist_parse(&l, list, err, sizeof err);
        check(&l, r, err);
        hvd_hostlist_clear(&l);
        free(list);

        if (memfd < 0 && (memfd = memfd_create("hvd-fuzz-hostfile", MFD_CLOEXEC)) < 0)
                abort();
        FUZZ_ASSERT(ftruncate(memfd, 0) == 0 && pwrite(memfd, data, size, 0) == (ssize_t) size, "memfd write");
        char path[64];
        snprintf(path, sizeof path, "/proc/self/fd/%d", memfd);
        err[0] = 0;
        r = hvd_hostlist_parse_file(&l, path, err, sizeof err);
        check(&l, r, err);
        hvd_hostlist_clear(&l);
        return 0;
}
