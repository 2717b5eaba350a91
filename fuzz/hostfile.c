/* hostfile.c — fuzzes hvdrun's host list parsers: the -H list and the
 * --hostfile lines ("host slots=N", "host:N", "[v6addr]:N", comments).
 * hvdrun.c is compiled into this harness with its main() renamed, so the
 * parsers are fuzzed as they are, statics and all. Invariants: at most
 * MAX_NP slots in total, every host name non-empty and not an option. */
int hvdrun_main(int argc, char **argv);
#define main hvdrun_main
#include "../tools/hvdrun.c"
#undef main

#include <sys/mman.h>

#include "fuzz.h"

static int memfd = -1;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
        /* the parsers explain every refusal on stderr; fuzz/run.sh passes
         * -close_fd_mask=2, which keeps the sanitizers' reports */
        return 0;
}

static void check(options_t *o, long total) {
        long sum = 0;
        for (size_t i = 0; i < o->n_hosts; i++) {
                FUZZ_ASSERT(o->hosts[i].name && o->hosts[i].name[0] && o->hosts[i].name[0] != '-',
                            "bad host name accepted");
                FUZZ_ASSERT(o->hosts[i].slots >= 1, "host with %ld slots", o->hosts[i].slots);
                sum += o->hosts[i].slots;
        }
        FUZZ_ASSERT(sum == total && total <= MAX_NP, "slot count %ld / %ld", sum, total);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        char *list = malloc(size + 1);
        memcpy(list, data, size);
        list[size] = 0;
        options_t o = { 0 };
        long total = 0;
        if (parse_host_list(&o, list, &total) == 0)
                check(&o, total);
        hosts_free(o.hosts, o.n_hosts);
        free(list);

        if (memfd < 0 && (memfd = memfd_create("hvd-fuzz-hostfile", MFD_CLOEXEC)) < 0)
                abort();
        FUZZ_ASSERT(ftruncate(memfd, 0) == 0 && pwrite(memfd, data, size, 0) == (ssize_t) size, "memfd write");
        char path[64];
        snprintf(path, sizeof path, "/proc/self/fd/%d", memfd);
        options_t f = { 0 };
        total = 0;
        if (parse_hostfile(&f, path, &total) == 0)
                check(&f, total);
        hosts_free(f.hosts, f.n_hosts);
        return 0;
}
