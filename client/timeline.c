/* timeline.c — rank 0's Chrome trace-event timeline (see timeline.h).
 * Invariants: the file is "[\n" then events separated by ",\n", each event
 * on its own line, written only in whole events from a memory buffer; on
 * stop it gets "\n]\n". Every row's timestamps never go backwards (a mark
 * older than the row's last event is drawn at that event). One mutex guards
 * everything; the on flag is only a fast path. A closed file's rows, clock
 * and end are kept, so that the next elastic generation's rank 0 in the
 * same process continues the file (hvd_timeline_continue). */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "strmap.h"
#include "timeline.h"
#include "util.h"

#define FLUSH_BYTES (64 * 1024)

atomic_bool hvd_timeline_active, hvd_timeline_changed;

typedef struct row {
        int pid;
        int64_t last_ts;
        bool open_op, open_act;
} row_t;

static struct {
        pthread_mutex_t lock;
        pthread_cond_t cond;
        uint64_t change_seq, told_seq; /* starts and stops; how many the daemon was told of */
        int fd;
        pid_t pid;     /* the process that writes; a forked child must not */
        char *path;    /* of the last file started */
        off_t written; /* bytes written to it */
        off_t end;     /* its size before the closing "\n]\n" (after a stop) */
        bool mark_cycles;
        uint64_t t0;
        char *buf;
        size_t len, cap;
        bool first;
        bool failed;        /* a write failed: the rest is dropped */
        hvd_strmap_t *rows; /* tensor name → row_t */
        int n_rows;
        /* the operation in progress */
        row_t **cur;
        size_t n_cur, cap_cur;
        int64_t op_start;
        int phase;
        bool any_phase, gpu;
        uint32_t kind;
} T = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER, .fd = -1 };

static const char *kind_upper(uint32_t k) {
        static const char *const names[] = { "NONE",     "ALLREDUCE",     "BROADCAST", "ALLGATHER",
                                             "ALLTOALL", "REDUCESCATTER", "BARRIER",   "JOIN" };
        return k < ELEMENTSOF(names) ? names[k] : "UNKNOWN";
}

static int64_t ts_of(uint64_t usec) {
        return (int64_t) usec - (int64_t) T.t0;
}

static void put(const char *s, size_t n) {
        if (T.failed)
                return;
        if (T.len + n > T.cap) {
                size_t cap = HVD_MAX(T.cap * 2, T.len + n + FLUSH_BYTES);
                char *nb = realloc(T.buf, cap);
                if (!nb) {
                        T.failed = true;
                        return;
                }
                T.buf = nb;
                T.cap = cap;
        }
        memcpy(T.buf + T.len, s, n);
        T.len += n;
}

static void putf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void putf(const char *fmt, ...) {
        char tmp[512];
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
        va_end(ap);
        if (n > 0)
                put(tmp, HVD_MIN((size_t) n, sizeof tmp - 1));
}

/* A JSON string: names are validated UTF-8 without control characters,
 * so only quotes and backslashes need escaping. */
static void put_json_string(const char *s) {
        put("\"", 1);
        for (const char *p = s; *p; p++) {
                if (*p == '"' || *p == '\\')
                        put("\\", 1);
                else if ((unsigned char) *p < 0x20) {
                        putf("\\u%04x", (unsigned) (unsigned char) *p);
                        continue;
                }
                put(p, 1);
        }
        put("\"", 1);
}

/* Starts one event: the separator, then "{" */
static void ev_open(void) {
        if (T.first)
                put("{", 1);
        else
                put(",\n{", 3);
        T.first = false;
}

static void write_all(void) {
        size_t off = 0;
        while (off < T.len && !T.failed) {
                ssize_t w = write(T.fd, T.buf + off, T.len - off);
                if (w < 0 && errno == EINTR)
                        continue;
                if (w <= 0)
                        T.failed = true;
                else {
                        off += (size_t) w;
                        T.written += w;
                }
        }
        T.len = 0;
}

static int64_t row_ts(row_t *r, int64_t ts) {
        if (ts < r->last_ts)
                ts = r->last_ts;
        r->last_ts = ts;
        return ts;
}

static row_t *row_get(const char *name) {
        size_t n = strlen(name);
        row_t *r = hvd_strmap_get(T.rows, name, n);
        if (r)
                return r;
        r = calloc(1, sizeof *r);
        if (!r || hvd_strmap_put(T.rows, name, n, r) < 0) {
                free(r);
                return NULL;
        }
        r->pid = ++T.n_rows;
        ev_open();
        putf("\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":", r->pid);
        put_json_string(name);
        put("}}", 2);
        ev_open();
        putf("\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"sort_index\":%d}}", r->pid,
             r->pid);
        return r;
}

static void ev_phase(row_t *r, char ph, const char *name, int64_t ts) {
        ev_open();
        putf("\"ph\":\"%c\",", ph);
        if (name)
                putf("\"name\":\"%s\",", name);
        putf("\"ts\":%" PRId64 ",\"pid\":%d,\"tid\":0}", row_ts(r, ts), r->pid);
}

static void ev_mark(row_t *r, uint32_t rank, int64_t ts) {
        ev_open();
        putf("\"ph\":\"i\",\"s\":\"t\",\"name\":\"%" PRIu32 "\",\"ts\":%" PRId64 ",\"pid\":%d,\"tid\":0,"
             "\"args\":{\"rank\":%" PRIu32 "}}",
             rank, row_ts(r, ts), r->pid, rank);
}

static void rows_free(void) {
        if (!T.rows)
                return;
        size_t iter = 0;
        void *v;
        while (hvd_strmap_next(T.rows, &iter, NULL, NULL, &v))
                free(v);
        hvd_strmap_destroy(&T.rows);
        T.n_rows = 0;
}

/* Ends the file; its rows stay for hvd_timeline_continue. */
static void close_locked(void) {
        if (T.fd < 0)
                return;
        int64_t now = ts_of(hvd_now_usec());
        /* an operation cut short by the stop still ends, so B and E match */
        for (size_t i = 0; i < T.n_cur; i++) {
                if (T.cur[i]->open_act)
                        ev_phase(T.cur[i], 'E', NULL, now);
                if (T.cur[i]->open_op)
                        ev_phase(T.cur[i], 'E', NULL, now);
        }
        for (size_t i = 0; i < T.n_cur; i++)
                T.cur[i]->open_op = T.cur[i]->open_act = false;
        T.n_cur = 0;
        T.end = T.written + (off_t) T.len;
        put("\n]\n", 3);
        write_all();
        close(T.fd);
        T.fd = -1;
        free(T.buf);
        T.buf = NULL;
        T.len = T.cap = 0;
        atomic_store(&hvd_timeline_active, false);
        T.change_seq++;
        atomic_store(&hvd_timeline_changed, true);
}

int hvd_timeline_start(const char *path, bool mark_cycles, bool exclusive, char *err, size_t err_len) {
        if (!path || !*path) {
                snprintf(err, err_len, "timeline: no file name given");
                return -EINVAL;
        }
        int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | (exclusive ? O_EXCL : O_TRUNC), 0644);
        if (fd < 0) {
                int r = -errno;
                snprintf(err, err_len, "timeline: cannot create '%s': %s%s", path, strerror(errno),
                         r == -EEXIST ? " (a timeline started from outside the job never replaces a file)" : "");
                return r;
        }
        hvd_strmap_t *rows = hvd_strmap_new();
        char *copy = strdup(path);
        if (!rows || !copy) {
                hvd_strmap_destroy(&rows);
                free(copy);
                close(fd);
                snprintf(err, err_len, "timeline: out of memory");
                return -ENOMEM;
        }
        pthread_mutex_lock(&T.lock);
        close_locked();
        rows_free();
        free(T.path);
        T.path = copy;
        T.written = 0;
        T.fd = fd;
        T.pid = getpid();
        T.rows = rows;
        T.mark_cycles = mark_cycles;
        T.t0 = hvd_now_usec();
        T.first = true;
        T.failed = false;
        T.n_cur = 0;
        put("[\n", 2);
        ev_open();
        putf("\"name\":\"process_name\",\"ph\":\"M\",\"pid\":0,\"tid\":0,\"args\":{\"name\":\"hvd\"}}");
        write_all();
        T.change_seq++;
        atomic_store(&hvd_timeline_changed, true);
        atomic_store(&hvd_timeline_active, true);
        pthread_mutex_unlock(&T.lock);
        return 0;
}

int hvd_timeline_continue(const char *path, bool mark_cycles, char *err, size_t err_len) {
        pthread_mutex_lock(&T.lock);
        int fd = -1;
        if (path && T.fd < 0 && T.rows && T.path && T.pid == getpid() && strcmp(T.path, path) == 0)
                fd = open(path, O_WRONLY | O_CLOEXEC);
        struct stat st;
        /* only a file that still ends where this process closed it */
        if (fd >= 0 && (fstat(fd, &st) < 0 || st.st_size != T.end + 3 || ftruncate(fd, T.end) < 0 ||
                        lseek(fd, 0, SEEK_END) != T.end)) {
                close(fd);
                fd = -1;
        }
        if (fd < 0) {
                pthread_mutex_unlock(&T.lock);
                return hvd_timeline_start(path, mark_cycles, false, err, err_len);
        }
        T.fd = fd;
        T.written = T.end;
        T.mark_cycles = mark_cycles;
        T.first = false;
        T.failed = false;
        T.n_cur = 0;
        T.change_seq++;
        atomic_store(&hvd_timeline_changed, true);
        atomic_store(&hvd_timeline_active, true);
        pthread_mutex_unlock(&T.lock);
        return 0;
}

/* The arguments of both reset events. */
static void reset_args(const hvd_timeline_reset_t *r) {
        putf("\"args\":{\"generation\":%" PRIu64 ",\"size\":%" PRIu32 ",\"previous_size\":%" PRIu32
             ",\"joined\":%" PRIu32 ",\"left\":%" PRIu32 ",\"sync\":%s,\"joined_names\":",
             r->generation, r->size, r->previous_size, r->joined, r->left, r->sync ? "true" : "false");
        put_json_string(r->joined_names ? r->joined_names : "");
        put(",\"left_names\":", 14);
        put_json_string(r->left_names ? r->left_names : "");
        put(",\"cause\":", 9);
        put_json_string(r->cause ? r->cause : "");
        put("}}", 2);
}

void hvd_timeline_reset(const hvd_timeline_reset_t *r) {
        pthread_mutex_lock(&T.lock);
        if (T.fd >= 0) {
                int64_t end = ts_of(hvd_now_usec()), start = r->start_usec ? ts_of(r->start_usec) : end;
                if (start < 0)
                        start = 0; /* the reset began before this file */
                ev_open();
                putf("\"ph\":\"X\",\"name\":\"ELASTIC_RESET\",\"ts\":%" PRId64 ",\"dur\":%" PRId64
                     ",\"pid\":0,\"tid\":0,",
                     start, end - start);
                reset_args(r);
                ev_open();
                putf("\"ph\":\"i\",\"s\":\"g\",\"name\":\"GENERATION %" PRIu64 "\",\"ts\":%" PRId64
                     ",\"pid\":0,\"tid\":0,",
                     r->generation, end);
                reset_args(r);
                write_all();
        }
        pthread_mutex_unlock(&T.lock);
}

int hvd_timeline_stop(void) {
        pthread_mutex_lock(&T.lock);
        bool was = T.fd >= 0;
        bool failed = T.failed;
        close_locked();
        pthread_mutex_unlock(&T.lock);
        return was && failed ? -EIO : 0;
}

/* A program may end without hvd_shutdown(): its timeline still ends
 * with "]" (not when a forked child exits: the file is its parent's). */
static void __attribute__((destructor)) timeline_at_exit(void) {
        pthread_mutex_lock(&T.lock);
        if (T.fd >= 0 && T.pid == getpid())
                close_locked();
        if (T.fd < 0) {
                rows_free();
                free(T.path);
                T.path = NULL;
        }
        pthread_mutex_unlock(&T.lock);
}

bool hvd_timeline_take_change(bool *on) {
        pthread_mutex_lock(&T.lock);
        bool c = atomic_exchange(&hvd_timeline_changed, false);
        *on = T.fd >= 0;
        T.told_seq = T.change_seq;
        pthread_cond_broadcast(&T.cond);
        pthread_mutex_unlock(&T.lock);
        return c;
}

void hvd_timeline_wait_told(uint64_t timeout_usec) {
        struct timespec ts = hvd_realtime_after(timeout_usec);
        pthread_mutex_lock(&T.lock);
        uint64_t want = T.change_seq;
        while (T.told_seq < want)
                if (pthread_cond_timedwait(&T.cond, &T.lock, &ts) != 0)
                        break;
        pthread_mutex_unlock(&T.lock);
}

/* Whether member a of en became ready before member b (ties: by position). */
static bool older(const Hvd__Entry *en, size_t a, size_t b) {
        return en->ready_age_usec[a] > en->ready_age_usec[b] ||
               (en->ready_age_usec[a] == en->ready_age_usec[b] && a < b);
}

/* Rank 0 takes part in op (not so for a process set without it). */
static bool rank0_in(const Hvd__Op *op) {
        if (!op->process_set)
                return true;
        for (size_t i = 0; i < op->n_set_ranks; i++)
                if (op->set_ranks[i] == 0)
                        return true;
        return false;
}

void hvd_timeline_schedule(const Hvd__Schedule *s, hvd_timeline_name_fn name_of) {
        pthread_mutex_lock(&T.lock);
        if (T.fd < 0)
                goto out;
        uint64_t now_usec = hvd_now_usec();
        int64_t now = ts_of(now_usec);
        char what[64];
        for (size_t i = 0; i < s->n_ops; i++) {
                const Hvd__Op *op = s->ops[i];
                if (!rank0_in(op))
                        continue;
                snprintf(what, sizeof what, "NEGOTIATE_%s", kind_upper(op->kind));
                for (size_t k = 0; k < op->n_entries; k++) {
                        const Hvd__Entry *en = op->entries[k];
                        const char *name = name_of(en);
                        row_t *r = name ? row_get(name) : NULL;
                        if (!r)
                                continue;
                        uint64_t oldest = 0;
                        for (size_t q = 0; q < en->n_ready_age_usec; q++)
                                oldest = HVD_MAX(oldest, en->ready_age_usec[q]);
                        ev_phase(r, 'B', what, now - (int64_t) HVD_MIN(oldest, now_usec));
                        /* marks in the order the ranks became ready */
                        size_t prev = SIZE_MAX;
                        for (size_t m = 0; m < en->n_ready_ranks; m++) {
                                size_t best = SIZE_MAX;
                                for (size_t q = 0; q < en->n_ready_ranks; q++)
                                        if ((prev == SIZE_MAX || older(en, prev, q)) &&
                                            (best == SIZE_MAX || older(en, q, best)))
                                                best = q;
                                prev = best;
                                ev_mark(r, en->ready_ranks[best],
                                        now - (int64_t) HVD_MIN(en->ready_age_usec[best], now_usec));
                        }
                        ev_phase(r, 'E', NULL, now);
                }
        }
out:
        pthread_mutex_unlock(&T.lock);
}

void hvd_timeline_op_begin(const Hvd__Op *op, hvd_timeline_name_fn name_of, bool gpu) {
        pthread_mutex_lock(&T.lock);
        T.n_cur = 0;
        if (T.fd < 0 || !rank0_in(op))
                goto out;
        if (op->n_entries > T.cap_cur) {
                row_t **nc = realloc(T.cur, op->n_entries * sizeof *nc);
                if (!nc)
                        goto out;
                T.cur = nc;
                T.cap_cur = op->n_entries;
        }
        T.op_start = ts_of(hvd_now_usec());
        T.phase = HVD_TL_PHASE_NONE;
        T.any_phase = false;
        T.gpu = gpu;
        T.kind = op->kind;
        for (size_t k = 0; k < op->n_entries; k++) {
                const char *name = name_of(op->entries[k]);
                row_t *r = name ? row_get(name) : NULL;
                if (!r)
                        continue;
                T.cur[T.n_cur++] = r;
                ev_open();
                putf("\"ph\":\"B\",\"name\":\"%s\",\"ts\":%" PRId64 ",\"pid\":%d,\"tid\":0,\"args\":{\"tensors\":%zu}}",
                     kind_upper(op->kind), row_ts(r, T.op_start), r->pid, op->n_entries);
                r->open_op = true;
                r->open_act = false;
        }
out:
        pthread_mutex_unlock(&T.lock);
}

static void activity_name(int phase, char *buf, size_t len) {
        switch (phase) {
        case HVD_TL_PHASE_COPY_IN: snprintf(buf, len, "MEMCPY_IN_FUSION_BUFFER"); break;
        case HVD_TL_PHASE_COPY_OUT: snprintf(buf, len, "MEMCPY_OUT_FUSION_BUFFER"); break;
        case HVD_TL_PHASE_NETWORK: snprintf(buf, len, "TCP_RING_%s", kind_upper(T.kind)); break;
        default: snprintf(buf, len, "%s_%s", T.gpu ? "NCCL" : "SHM", kind_upper(T.kind)); break;
        }
}

static void switch_phase(int phase, int64_t ts) {
        char name[64];
        activity_name(phase, name, sizeof name);
        for (size_t i = 0; i < T.n_cur; i++) {
                row_t *r = T.cur[i];
                if (r->open_act)
                        ev_phase(r, 'E', NULL, ts);
                r->open_act = phase != HVD_TL_PHASE_NONE;
                if (r->open_act)
                        ev_phase(r, 'B', name, ts);
        }
        T.phase = phase;
}

void hvd_timeline_phase(void *userdata, int phase) {
        (void) userdata;
        pthread_mutex_lock(&T.lock);
        if (T.fd >= 0 && T.n_cur && phase != T.phase) {
                switch_phase(phase, ts_of(hvd_now_usec()));
                T.any_phase = true;
        }
        pthread_mutex_unlock(&T.lock);
}

void hvd_timeline_op_end(int status) {
        pthread_mutex_lock(&T.lock);
        if (T.fd < 0 || !T.n_cur)
                goto out;
        int64_t now = ts_of(hvd_now_usec());
        if (!T.any_phase) {
                /* the data plane said nothing finer: the whole op is the collective */
                switch_phase(HVD_TL_PHASE_COLLECTIVE, T.op_start);
        }
        switch_phase(HVD_TL_PHASE_NONE, now);
        for (size_t i = 0; i < T.n_cur; i++) {
                row_t *r = T.cur[i];
                ev_open();
                putf("\"ph\":\"E\",\"ts\":%" PRId64 ",\"pid\":%d,\"tid\":0", row_ts(r, now), r->pid);
                if (status < 0)
                        putf(",\"args\":{\"error\":%d}", status);
                put("}", 1);
                r->open_op = false;
        }
        T.n_cur = 0;
        if (T.len >= FLUSH_BYTES)
                write_all();
out:
        pthread_mutex_unlock(&T.lock);
}

void hvd_timeline_cycle(void) {
        pthread_mutex_lock(&T.lock);
        if (T.fd >= 0 && T.mark_cycles) {
                ev_open();
                putf("\"ph\":\"i\",\"s\":\"g\",\"name\":\"CYCLE_START\",\"ts\":%" PRId64 ",\"pid\":0,\"tid\":0}",
                     ts_of(hvd_now_usec()));
        }
        pthread_mutex_unlock(&T.lock);
}

void hvd_timeline_flush(void) {
        pthread_mutex_lock(&T.lock);
        if (T.fd >= 0 && T.len)
                write_all();
        pthread_mutex_unlock(&T.lock);
}
