/* hostlist.h — hvdrun's host lists: "-H a:2,b,[fe80::1]:4" and host files
 * ("host slots=N", "host:N", "[v6addr]:N" or "host" per line, '#'
 * comments). Parsing only: entries stay in the order listed, a repeated
 * name stays repeated (hvdrun merges them when it plans the hosts). */
#ifndef HVD_HOSTLIST_H
#define HVD_HOSTLIST_H

#include <stddef.h>

#define HVD_HOSTLIST_MAX_SLOTS  4096 /* in all the entries of one list: hvdrun's -np limit */
#define HVD_HOSTLIST_NAME_BYTES 256  /* a host name is shorter */
#define HVD_HOSTLIST_ENTRY_MAX  511  /* bytes of one entry, blanks around it trimmed */
#define HVD_HOSTLIST_LINE_MAX   1022 /* bytes of one host file line, without its newline */

typedef struct hvd_host_entry {
        char *name; /* owned; non-empty, no ',', not starting with '-', brackets of "[v6]" removed */
        long slots; /* 1..HVD_HOSTLIST_MAX_SLOTS */
} hvd_host_entry_t;

typedef struct hvd_hostlist {
        hvd_host_entry_t *v; /* owned */
        size_t n;
        long total_slots; /* sum of v[].slots */
} hvd_hostlist_t;

/* Appends the entries of a comma-separated list (-H; empty entries are
 * skipped) to l. Returns 0, -EINVAL with what is wrong in err (the user's
 * mistake: "host 'b' in -H: slots 'x' is not a number in 1..4096"), or
 * -ENOMEM. On failure l keeps the entries appended before the bad one. */
int hvd_hostlist_parse(hvd_hostlist_t *l, const char *list, char *err, size_t err_len);

/* The same for the lines of the host file at path (entries name it in
 * their messages). Returns 0, -EINVAL (err as above), -ENOMEM, or -errno
 * when the file cannot be opened ("cannot open host file F: ..." in err). */
int hvd_hostlist_parse_file(hvd_hostlist_t *l, const char *path, char *err, size_t err_len);

/* Frees the entries; l is empty after, and may be reused. */
void hvd_hostlist_clear(hvd_hostlist_t *l);

#endif
