/* invariant.c — what a failed hvd_assert() does: one line on stderr naming
 * the broken invariant, then abort() for a core dump. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>

#include "invariant.h"

void hvd_assert_failed(const char *expr, const char *file, int line, const char *func) {
        fprintf(stderr, "hvd: assertion '%s' failed at %s:%d, function %s(); this is a bug in hvd\n", expr, file, line,
                func);
        abort();
}
