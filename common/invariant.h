/* invariant.h — hvd_assert(): an invariant the code relies on, checked in
 * every build but one configured with --disable-asserts. A failed check
 * is a bug in hvd, never bad input (bad input gets an error): it prints
 * the expression and where it is, then aborts. */
#ifndef HVD_INVARIANT_H
#define HVD_INVARIANT_H

#include "config.h"

void hvd_assert_failed(const char *expr, const char *file, int line, const char *func) __attribute__((noreturn));

#ifdef HVD_NO_ASSERTS
#define hvd_assert(expr) ((void) sizeof(!(expr)))
#else
#define hvd_assert(expr)                                                                                               \
        (__builtin_expect(!!(expr), 1) ? (void) 0 : hvd_assert_failed(#expr, __FILE__, __LINE__, __func__))
#endif

#endif
