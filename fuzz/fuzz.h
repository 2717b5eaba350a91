/* fuzz.h — what every harness in fuzz/ defines: libFuzzer's entry point.
 * Built either with clang -fsanitize=fuzzer (configure --enable-fuzzing)
 * or with standalone.c, a main() that runs each corpus file once so the
 * committed corpus is a regression test under any compiler. */
#ifndef HVD_FUZZ_H
#define HVD_FUZZ_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* A harness found a broken invariant: print and abort (the fuzzer keeps
 * the input, the regression run fails). */
#define FUZZ_ASSERT(cond, ...)                                                                                         \
        do {                                                                                                           \
                if (!(cond)) {                                                                                         \
                        fprintf(stderr, "invariant broken: %s: ", #cond);                                              \
                        fprintf(stderr, __VA_ARGS__);                                                                  \
                        fputc('\n', stderr);                                                                           \
                        abort();                                                                                       \
                }                                                                                                      \
        } while (0)

#endif
