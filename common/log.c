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

int hvd_log_internal(int level, int err, const char *fmt, ...) {
        char buf[2048];
        va_list ap;
        int saved = errno;

        va_start(ap, fmt);
        vsnprintf(buf, sizeof buf, fmt, ap);
        va_end(ap);
        if (err < 0)
                fprintf(stderr, "<%d>%s: %s: %s\n", level, log_ident, buf, hvd_strerror(err));
        else
                fprintf(stderr, "<%d>%s: %s\n", level, log_ident, buf);
        errno = saved;
        return err;
}
