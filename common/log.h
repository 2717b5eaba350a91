/* log.h — one line per event to stderr with a "<N>" syslog priority
 * prefix, so journald files it at the right level. Only programs (daemon,
 * tools) log; libhvd never prints. The level is checked before formatting. */
#ifndef HVD_LOG_H
#define HVD_LOG_H

#include <syslog.h>

extern int hvd_log_max_level;

/* Parse "err", "warning", "notice", "info", "debug" or a number 0..7. */
int hvd_log_level_from_string(const char *s);
const char *hvd_log_level_to_string(int level);
void hvd_log_set_ident(const char *ident);

/* Logs (if level is enabled) and returns err, so callers can
 * "return hvd_log_error(r, ...)". err < 0 appends hvd_strerror(err). */
int hvd_log_internal(int level, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#define hvd_log_full(level, err, ...)                                                                                  \
        ((level) <= hvd_log_max_level ? hvd_log_internal((level), (err), __VA_ARGS__) : (err))
#define hvd_log_debug(...)      hvd_log_full(LOG_DEBUG, 0, __VA_ARGS__)
#define hvd_log_info(...)       hvd_log_full(LOG_INFO, 0, __VA_ARGS__)
#define hvd_log_notice(...)     hvd_log_full(LOG_NOTICE, 0, __VA_ARGS__)
#define hvd_log_warning(...)    hvd_log_full(LOG_WARNING, 0, __VA_ARGS__)
#define hvd_log_error(err, ...) hvd_log_full(LOG_ERR, (err), __VA_ARGS__)

#endif
