/* conf.c — fuzzes the daemon's configuration parser (common/conf.c): the
 * key = value file loader through a memfd, and the size, duration and
 * boolean parsers the worker's HVD_* environment shares. Invariant: a load
 * that fails leaves the configuration untouched and says where and why. */
#define _GNU_SOURCE
#include "config.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "conf.h"
#include "fuzz.h"

static int fd = -1;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
        return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        if (fd < 0 && (fd = memfd_create("hvd-fuzz-conf", MFD_CLOEXEC)) < 0)
                abort();
        FUZZ_ASSERT(ftruncate(fd, 0) == 0 && pwrite(fd, data, size, 0) == (ssize_t) size, "memfd write");
        char path[64];
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);

        hvd_daemon_config_t cfg, before;
        memset(&cfg, 0, sizeof cfg);
        hvd_daemon_config_init(&cfg);
        before = cfg;
        unsigned line = 0;
        char msg[1024] = "";
        int r = hvd_daemon_config_load(&cfg, path, &line, msg, sizeof msg);
        if (r < 0) {
                FUZZ_ASSERT(memcmp(&cfg, &before, sizeof cfg) == 0, "failed load changed the config");
                FUZZ_ASSERT(msg[0], "failed load without a message");
                FUZZ_ASSERT(line >= 1, "failed load without a line number");
        } else {
                FUZZ_ASSERT(memchr(cfg.runtime_dir, 0, sizeof cfg.runtime_dir), "runtime_dir unterminated");
                FUZZ_ASSERT(cfg.max_jobs >= 1 && cfg.max_jobs <= 65536, "max_jobs %u out of range", cfg.max_jobs);
                FUZZ_ASSERT(cfg.socket_mode <= 0777, "socket_mode %o out of range", cfg.socket_mode);
                FUZZ_ASSERT(cfg.log_level >= 0 && cfg.log_level <= 7, "log level %d", cfg.log_level);
        }

        /* each line as a value for the shared parsers */
        char *copy = malloc(size + 1);
        memcpy(copy, data, size);
        copy[size] = 0;
        for (char *save = NULL, *l = strtok_r(copy, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
                uint64_t v;
                bool b;
                hvd_parse_size(l, &v);
                hvd_parse_duration(l, 1000, &v);
                hvd_parse_bool(l, &b);
        }
        free(copy);
        return 0;
}
