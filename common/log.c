/* log.c — stderr logging with syslog priority prefixes (see log.h). */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "hvd.h"
#include "log.h"

int hvd_log_max_level = LOG_NOTICE;
static const char *log_ident = "hvd";

static const char *const level_names[] = {
        "emerg", "alert", "crit", "err", "warning", "notice", "info", "debug",
};

int hvd_log_level_from_string(const char *s) {
        if (!s || !*s)
                return -EINVAL;
        for (int i = 0; i < 8; i++)
                if (strcasecmp(s, level_names[i]) == 0)
                        return i;
        if (strcasecmp(s, "error") == 0)
                return LOG_ERR;
        if (strcasecmp(s, "warn") == 0)
                return LOG_WARNING;
        if (s[0] >= '0' && s[0] <= '7' && s[1] == 0)
                return s[0] - '0';
        return -EINVAL;
}

const char *hvd_log_level_to_string(int level) {
        return level >= 0 && level < 8 ? level_names[level] : "?";
}

void hvd_log_set_ident(const char *ident) {
        log_ident = ident;
}

/* "<N>" prefixes when journald reads stderr (JOURNAL_STREAM is set, or
 * HVD_LOG_PREFIX=1); a readable level word on a terminal. */
static int use_prefix = -1;

int hvd_log_internal(int level, int err, const char *fmt, ...) {
        char buf[2048], head[96];
        va_list ap;
        int saved = errno;

        if (use_prefix < 0) {
                const char *p = getenv("HVD_LOG_PREFIX");
                use_prefix = p ? strcmp(p, "0") != 0 : getenv("JOURNAL_STREAM") != NULL;
        }
        va_start(ap, fmt);
        vsnprintf(buf, sizeof buf, fmt, ap);
        va_end(ap);
        if (use_prefix)
                snprintf(head, sizeof head, "<%d>%s", level, log_ident);
        else if (level <= LOG_WARNING)
                snprintf(head, sizeof head, "%s: %s", log_ident, level <= LOG_ERR ? "error" : "warning");
        else
                snprintf(head, sizeof head, "%s", log_ident);
        if (err < 0)
                fprintf(stderr, "%s: %s: %s\n", head, buf, hvd_strerror(err));
        else
                fprintf(stderr, "%s: %s\n", head, buf);
        errno = saved;
        return err;
}
