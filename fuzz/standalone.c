/* standalone.c — main() for running a harness without libFuzzer: each
 * argument (a file, or a directory whose regular files are all read) is
 * passed once to LLVMFuzzerTestOneInput. Without arguments it runs the
 * committed corpus $HVD_SRCDIR/fuzz/corpus/<FUZZ_NAME>. Exits non-zero if
 * there was nothing to run; a harness that finds a bug aborts. */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

static int run_file(const char *path, size_t *count) {
        FILE *f = fopen(path, "rb");
        if (!f) {
                fprintf(stderr, "%s: %s\n", path, strerror(errno));
                return -1;
        }
        size_t cap = 4096, len = 0;
        uint8_t *buf = malloc(cap);
        size_t n;
        while (buf && (n = fread(buf + len, 1, cap - len, f)) > 0) {
                len += n;
                if (len == cap) {
                        uint8_t *nb = realloc(buf, cap *= 2);
                        if (!nb)
                                free(buf);
                        buf = nb;
                }
        }
        fclose(f);
        if (!buf)
                return -1;
        /* an exact-size copy, so ASan sees reads past the input's end */
        uint8_t *exact = malloc(len ? len : 1);
        memcpy(exact, buf, len);
        free(buf);
        LLVMFuzzerTestOneInput(exact, len);
        free(exact);
        (*count)++;
        return 0;
}

static int run_path(const char *path, size_t *count) {
        struct stat st;
        if (stat(path, &st) < 0) {
                fprintf(stderr, "%s: %s\n", path, strerror(errno));
                return -1;
        }
        if (!S_ISDIR(st.st_mode))
                return run_file(path, count);
        struct dirent **names;
        int n = scandir(path, &names, NULL, alphasort);
        if (n < 0) {
                fprintf(stderr, "%s: %s\n", path, strerror(errno));
                return -1;
        }
        int r = 0;
        for (int i = 0; i < n; i++) {
                char p[4096];
                snprintf(p, sizeof p, "%s/%s", path, names[i]->d_name);
                if (names[i]->d_name[0] != '.' && stat(p, &st) == 0 && S_ISREG(st.st_mode) && run_file(p, count) < 0)
                        r = -1;
                free(names[i]);
        }
        free(names);
        return r;
}

int main(int argc, char **argv) {
        LLVMFuzzerInitialize(&argc, &argv);
        size_t count = 0;
        int r = 0;
        if (argc > 1) {
                for (int i = 1; i < argc; i++)
                        if (run_path(argv[i], &count) < 0)
                                r = 1;
        } else {
                const char *src = getenv("HVD_SRCDIR");
                char dir[4096];
                snprintf(dir, sizeof dir, "%s/fuzz/corpus/%s", src ? src : ".", FUZZ_NAME);
                if (run_path(dir, &count) < 0)
                        r = 1;
        }
        if (count == 0) {
                fprintf(stderr, "%s: no input files\n", FUZZ_NAME);
                return 1;
        }
        printf("%s: %zu input(s) ran without a finding\n", FUZZ_NAME, count);
        return r;
}
