/* zap.c — the daemon's ZAP handler and CURVE keys. One REP socket bound at
 * inproc://zeromq.zap.01 answers libzmq's authentication requests: the
 * peer domain admits only CURVE clients whose public key is listed, the
 * local domain admits every ipc peer and names its uid as User-Id. Every
 * refusal is logged once, with the peer's address and the reason.
 * Invariant: a socket gets a ZAP domain only together with
 * ZMQ_ZAP_ENFORCE_DOMAIN, so a handler that is not there fails closed. */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zmq.h>

#include "log.h"
#include "util.h"
#include "wire.h"
#include "zap.h"

#define ZAP_ENDPOINT     "inproc://zeromq.zap.01"
#define ZAP_BATCH        64
#define MAX_ALLOWED_KEYS 4096

typedef struct allowed_key {
        uint8_t key[32];
        char name[256];
} allowed_key_t;

struct hvd_zap {
        void *zctx;
        void *handler; /* REP */
        bool curve;
        char public_z85[HVD_CURVE_KEY_Z85_LEN + 1];
        char secret_z85[HVD_CURVE_KEY_Z85_LEN + 1];
        char keys_path[PATH_MAX];
        allowed_key_t *allowed;
        size_t n_allowed;
        void *monitored, *monitor; /* the peer ROUTER, and the PAIR reading its events */
        char monitor_ep[64];
};

/* ---- key files ---- */

/* The first non-comment word of a key file: a 40-character Z85 key. With
 * name (size name_len), also the rest of that line. */
static int parse_key_line(char *line, uint8_t key[32], char *z85, char *name, size_t name_len) {
        char *s = line + strspn(line, " \t");
        s[strcspn(s, "\r\n")] = 0;
        if (!*s || *s == '#')
                return 0;
        size_t n = strcspn(s, " \t");
        if (n != HVD_CURVE_KEY_Z85_LEN)
                return -EINVAL;
        char buf[HVD_CURVE_KEY_Z85_LEN + 1];
        memcpy(buf, s, n);
        buf[n] = 0;
        if (!zmq_z85_decode(key, buf))
                return -EINVAL;
        if (z85)
                memcpy(z85, buf, sizeof buf);
        if (name) {
                const char *rest = s + n + strspn(s + n, " \t");
                snprintf(name, name_len, "%s", rest);
        }
        return 1;
}

/* Reads the one key of a key file written by 'hvdctl keygen'. */
static int read_key_file(const char *path, bool secret, uint8_t key[32], char z85[HVD_CURVE_KEY_Z85_LEN + 1]) {
        FILE *f = fopen(path, "re");
        if (!f)
                return hvd_log_error(-errno, "Cannot read CURVE key file %s", path);
        struct stat st;
        if (secret && fstat(fileno(f), &st) == 0 && (st.st_mode & 077)) {
                fclose(f);
                return hvd_log_error(-EPERM,
                                     "CURVE secret key file %s is readable by others (mode %04o): chmod 0600 it", path,
                                     (unsigned) (st.st_mode & 07777));
        }
        char line[512];
        int r = 0;
        while (r == 0 && fgets(line, sizeof line, f))
                r = parse_key_line(line, key, z85, NULL, 0);
        fclose(f);
        if (r <= 0)
                return hvd_log_error(-EINVAL,
                                     "CURVE key file %s holds no 40-character Z85 key (write one with 'hvdctl keygen')",
                                     path);
        return 0;
}

static int add_allowed(hvd_zap_t *z, const uint8_t key[32], const char *name) {
        if (z->n_allowed >= MAX_ALLOWED_KEYS)
                return hvd_log_error(-E2BIG, "%s lists more than %d keys", z->keys_path, MAX_ALLOWED_KEYS);
        allowed_key_t *a = realloc(z->allowed, (z->n_allowed + 1) * sizeof *a);
        if (!a)
                return -ENOMEM;
        z->allowed = a;
        memcpy(a[z->n_allowed].key, key, 32);
        snprintf(a[z->n_allowed].name, sizeof a[z->n_allowed].name, "%s", name);
        z->n_allowed++;
        return 0;
}

/* A directory of NAME.key files (one key each), or a file of "KEY [NAME]" lines. */
static int load_allowed(hvd_zap_t *z, const char *path) {
        snprintf(z->keys_path, sizeof z->keys_path, "%s", path);
        struct stat st;
        if (stat(path, &st) < 0)
                return hvd_log_error(-errno, "Cannot read peer_public_keys %s", path);
        uint8_t key[32];
        char z85[HVD_CURVE_KEY_Z85_LEN + 1];
        int r;
        if (S_ISDIR(st.st_mode)) {
                struct dirent **names;
                int n = scandir(path, &names, NULL, alphasort);
                if (n < 0)
                        return hvd_log_error(-errno, "Cannot read peer_public_keys directory %s", path);
                r = 0;
                for (int i = 0; i < n; i++) {
                        const char *e = names[i]->d_name;
                        size_t len = strlen(e);
                        if (r == 0 && e[0] != '.' && len > 4 && strcmp(e + len - 4, ".key") == 0) {
                                char file[PATH_MAX + 256], name[256];
                                snprintf(file, sizeof file, "%s/%s", path, e);
                                snprintf(name, sizeof name, "%.*s", (int) (len - 4), e);
                                r = read_key_file(file, false, key, z85);
                                if (r == 0)
                                        r = add_allowed(z, key, name);
                        }
                        free(names[i]);
                }
                free(names);
                if (r < 0)
                        return r;
        } else {
                FILE *f = fopen(path, "re");
                if (!f)
                        return hvd_log_error(-errno, "Cannot read peer_public_keys %s", path);
                char line[1024], name[256];
                unsigned n = 0;
                r = 0;
                while (r >= 0 && fgets(line, sizeof line, f)) {
                        n++;
                        r = parse_key_line(line, key, z85, name, sizeof name);
                        if (r < 0)
                                hvd_log_error(
                                        r,
                                        "%s:%u: expected a 40-character Z85 public key, optionally followed by a name",
                                        path, n);
                        else if (r > 0)
                                r = add_allowed(z, key, name[0] ? name : z85);
                }
                fclose(f);
                if (r < 0)
                        return r;
        }
        if (z->n_allowed == 0)
                return hvd_log_error(-ENOKEY, "peer_public_keys %s lists no key: no other daemon could connect", path);
        return 0;
}

static const allowed_key_t *find_key(const hvd_zap_t *z, const uint8_t *key) {
        for (size_t i = 0; i < z->n_allowed; i++)
                if (memcmp(z->allowed[i].key, key, 32) == 0)
                        return &z->allowed[i];
        return NULL;
}

static const allowed_key_t *find_name(const hvd_zap_t *z, const char *name, size_t len) {
        for (size_t i = 0; i < z->n_allowed; i++)
                if (strlen(z->allowed[i].name) == len && strncmp(z->allowed[i].name, name, len) == 0)
                        return &z->allowed[i];
        return NULL;
}

/* ---- life cycle ---- */

int hvd_zap_new(void *zctx, const hvd_daemon_config_t *cfg, hvd_zap_t **ret) {
        hvd_zap_t *z = calloc(1, sizeof *z);
        if (!z)
                return -ENOMEM;
        z->zctx = zctx;
        int r;
        if (cfg->curve_secret_key_file[0] || cfg->peer_public_keys[0]) {
                if (!cfg->curve_secret_key_file[0] || !cfg->peer_public_keys[0]) {
                        r = hvd_log_error(-EINVAL, "CURVE needs both curve_secret_key_file and peer_public_keys");
                        goto fail;
                }
                if (!zmq_has("curve")) {
                        r = hvd_log_error(-ENOTSUP, "this libzmq has no CURVE support");
                        goto fail;
                }
                uint8_t key[32];
                if ((r = read_key_file(cfg->curve_secret_key_file, true, key, z->secret_z85)) < 0)
                        goto fail;
                if (zmq_curve_public(z->public_z85, z->secret_z85) < 0) {
                        r = hvd_log_error(-zmq_errno(), "Cannot derive the public key of %s",
                                          cfg->curve_secret_key_file);
                        goto fail;
                }
                if ((r = load_allowed(z, cfg->peer_public_keys)) < 0)
                        goto fail;
                z->curve = true;
                hvd_log_info("CURVE on the peer socket: public key %s, %zu allowed peer key(s) from %s", z->public_z85,
                             z->n_allowed, z->keys_path);
        }
        z->handler = zmq_socket(zctx, ZMQ_REP);
        if (!z->handler) {
                r = -zmq_errno();
                goto fail;
        }
        int zero = 0;
        zmq_setsockopt(z->handler, ZMQ_LINGER, &zero, sizeof zero);
        if ((r = hvd_zmq_bind(z->handler, ZAP_ENDPOINT)) < 0) {
                r = hvd_log_error(r, "Cannot bind the ZAP handler %s", ZAP_ENDPOINT);
                goto fail;
        }
        *ret = z;
        return 0;
fail:
        hvd_zap_destroy(&z);
        return r;
}

void hvd_zap_stop_monitor(hvd_zap_t *z) {
        if (!z || !z->monitor)
                return;
        if (z->monitored)
                zmq_socket_monitor(z->monitored, NULL, 0);
        zmq_close(z->monitor);
        z->monitor = z->monitored = NULL;
}

void hvd_zap_destroy(hvd_zap_t **zp) {
        if (!zp || !*zp)
                return;
        hvd_zap_t *z = *zp;
        hvd_zap_stop_monitor(z);
        if (z->handler)
                zmq_close(z->handler);
        /* the secret stays in memory no longer than the daemon needs it */
        explicit_bzero(z->secret_z85, sizeof z->secret_z85);
        free(z->allowed);
        free(z);
        *zp = NULL;
}

void *hvd_zap_socket(const hvd_zap_t *z) {
        return z->handler;
}

void *hvd_zap_monitor_socket(const hvd_zap_t *z) {
        return z->monitor;
}

bool hvd_zap_curve(const hvd_zap_t *z) {
        return z && z->curve;
}

/* ---- socket setup ---- */

static int enforce(void *sock, const char *domain) {
        int one = 1;
        if (zmq_setsockopt(sock, ZMQ_ZAP_DOMAIN, domain, strlen(domain)) < 0 ||
            zmq_setsockopt(sock, HVD_ZMQ_ZAP_ENFORCE_DOMAIN, &one, sizeof one) < 0)
                return hvd_log_error(-zmq_errno(), "Cannot put a socket under ZAP domain %s", domain);
        return 0;
}

int hvd_zap_setup_peer_server(hvd_zap_t *z, void *sock) {
        if (!z->curve)
                return 0;
        int one = 1;
        if (zmq_setsockopt(sock, ZMQ_CURVE_SERVER, &one, sizeof one) < 0 ||
            zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, z->secret_z85, HVD_CURVE_KEY_Z85_LEN + 1) < 0)
                return hvd_log_error(-zmq_errno(), "Cannot make the peer socket a CURVE server");
        int r = enforce(sock, HVD_ZAP_DOMAIN_PEER);
        if (r < 0)
                return r;
        snprintf(z->monitor_ep, sizeof z->monitor_ep, "inproc://hvd-peer-monitor-%p", (void *) z);
        if (zmq_socket_monitor(sock, z->monitor_ep,
                               ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                                       ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) < 0)
                return hvd_log_error(-zmq_errno(), "Cannot monitor the peer socket");
        z->monitored = sock;
        z->monitor = zmq_socket(z->zctx, ZMQ_PAIR);
        r = z->monitor ? hvd_zmq_connect(z->monitor, z->monitor_ep) : -zmq_errno();
        if (r < 0) {
                hvd_zap_stop_monitor(z);
                return hvd_log_error(r, "Cannot read the peer socket's monitor");
        }
        return 0;
}

int hvd_zap_setup_peer_client(hvd_zap_t *z, void *sock, const char *endpoint) {
        if (!z || !z->curve)
                return 0;
        /* tcp://HOST:PORT or tcp://[V6]:PORT */
        const char *hp = strstr(endpoint, "://");
        hp = hp ? hp + 3 : endpoint;
        const allowed_key_t *k = find_name(z, hp, strlen(hp));
        if (!k) {
                const char *colon = strrchr(hp, ':');
                size_t hlen = colon ? (size_t) (colon - hp) : strlen(hp);
                if (hlen >= 2 && hp[0] == '[' && hp[hlen - 1] == ']')
                        k = find_name(z, hp + 1, hlen - 2);
                if (!k)
                        k = find_name(z, hp, hlen);
        }
        if (!k)
                return hvd_log_error(-ENOKEY,
                                     "No CURVE public key for the root daemon at %s: add its key to %s as '%s.key' "
                                     "(or a line 'KEY %s')",
                                     endpoint, z->keys_path, hp, hp);
        char server[HVD_CURVE_KEY_Z85_LEN + 1];
        if (!zmq_z85_encode(server, k->key, 32))
                return -EINVAL;
        if (zmq_setsockopt(sock, ZMQ_CURVE_SERVERKEY, server, sizeof server) < 0 ||
            zmq_setsockopt(sock, ZMQ_CURVE_PUBLICKEY, z->public_z85, sizeof z->public_z85) < 0 ||
            zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, z->secret_z85, sizeof z->secret_z85) < 0)
                return hvd_log_error(-zmq_errno(), "Cannot make the connection to %s a CURVE client", endpoint);
        hvd_log_debug("CURVE client to %s pins server key %s ('%s')", endpoint, server, k->name);
        return 0;
}

int hvd_zap_setup_local(hvd_zap_t *z, void *sock) {
        return enforce(sock, HVD_ZAP_DOMAIN_LOCAL);
}

int hvd_zap_msg_uid(void *msg, uid_t *ret) {
        const char *u = zmq_msg_gets(msg, "User-Id");
        if (!u || !*u)
                return -ENODATA;
        char *end;
        errno = 0;
        unsigned long v = strtoul(u, &end, 10);
        if (errno || *end || v > UINT32_MAX)
                return -ENODATA;
        *ret = (uid_t) v;
        return 0;
}

/* ---- the handler ---- */

/* "host:uid:gid:pid" (SO_PEERCRED over ipc): the last three fields. */
static bool parse_ipc_creds(const char *addr, unsigned long *uid, unsigned long *gid, unsigned long *pid) {
        const char *p[3];
        const char *s = addr + strlen(addr);
        for (int i = 2; i >= 0; i--) {
                while (s > addr && s[-1] != ':')
                        s--;
                if (s == addr)
                        return false;
                p[i] = s;
                s--;
        }
        char *end;
        *uid = strtoul(p[0], &end, 10);
        if (*end != ':')
                return false;
        *gid = strtoul(p[1], &end, 10);
        if (*end != ':')
                return false;
        *pid = strtoul(p[2], &end, 10);
        return *end == 0;
}

static void reply(void *sock, const char *version, const char *req_id, size_t req_id_len, const char *code,
                  const char *text, const char *user) {
        hvd_zmq_send(sock, version, strlen(version), ZMQ_SNDMORE);
        hvd_zmq_send(sock, req_id, req_id_len, ZMQ_SNDMORE);
        hvd_zmq_send(sock, code, strlen(code), ZMQ_SNDMORE);
        hvd_zmq_send(sock, text, strlen(text), ZMQ_SNDMORE);
        hvd_zmq_send(sock, user, strlen(user), ZMQ_SNDMORE);
        hvd_zmq_send(sock, "", 0, 0);
}

#define ZAP_FRAMES 7
static void serve_one(hvd_zap_t *z, zmq_msg_t *f, int n) {
        char version[8] = "1.0", domain[64] = "", addr[256] = "", mech[16] = "";
#define STR(dst, i)                                                                                                    \
        snprintf(dst, sizeof dst, "%.*s", (int) HVD_MIN(zmq_msg_size(&f[i]), sizeof dst - 1),                          \
                 (const char *) zmq_msg_data(&f[i]))
        const char *req_id = n > 1 ? zmq_msg_data(&f[1]) : "";
        size_t req_id_len = n > 1 ? zmq_msg_size(&f[1]) : 0;
        if (n < 6) {
                hvd_log_warning("ZAP: malformed request (%d frames) refused", n);
                reply(z->handler, version, req_id, req_id_len, "500", "malformed request", "");
                return;
        }
        STR(domain, 2);
        STR(addr, 3);
        STR(mech, 5);
#undef STR
        if (strcmp(domain, HVD_ZAP_DOMAIN_PEER) == 0) {
                if (strcmp(mech, "CURVE") != 0 || n < 7 || zmq_msg_size(&f[6]) != 32) {
                        hvd_log_warning("refused a peer daemon at %s: mechanism %s, not CURVE", addr, mech);
                        reply(z->handler, version, req_id, req_id_len, "400", "CURVE required", "");
                        return;
                }
                const allowed_key_t *k = find_key(z, zmq_msg_data(&f[6]));
                char z85[HVD_CURVE_KEY_Z85_LEN + 1] = "?";
                zmq_z85_encode(z85, zmq_msg_data(&f[6]), 32);
                if (!k) {
                        hvd_log_warning("refused a peer daemon at %s: its CURVE key %s is not listed in %s", addr, z85,
                                        z->keys_path);
                        reply(z->handler, version, req_id, req_id_len, "400", "unknown key", "");
                        return;
                }
                hvd_log_info("peer daemon at %s authenticated as '%s'", addr, k->name);
                reply(z->handler, version, req_id, req_id_len, "200", "OK", k->name);
                return;
        }
        if (strcmp(domain, HVD_ZAP_DOMAIN_LOCAL) == 0) {
                unsigned long uid, gid, pid;
                if (!parse_ipc_creds(addr, &uid, &gid, &pid)) {
                        hvd_log_warning("refused a local connection: no peer credentials in '%s'", addr);
                        reply(z->handler, version, req_id, req_id_len, "400", "no credentials", "");
                        return;
                }
                char user[24];
                snprintf(user, sizeof user, "%lu", uid);
                reply(z->handler, version, req_id, req_id_len, "200", "OK", user);
                return;
        }
        hvd_log_warning("ZAP: request for unknown domain '%s' from %s refused", domain, addr);
        reply(z->handler, version, req_id, req_id_len, "400", "unknown domain", "");
}

void hvd_zap_handle(hvd_zap_t *z) {
        for (int k = 0; k < ZAP_BATCH; k++) {
                zmq_msg_t f[ZAP_FRAMES];
                int n = 0;
                zmq_msg_init(&f[0]);
                if (zmq_msg_recv(&f[0], z->handler, ZMQ_DONTWAIT) < 0) {
                        zmq_msg_close(&f[0]);
                        return;
                }
                n = 1;
                bool more = zmq_msg_more(&f[0]);
                while (more) {
                        zmq_msg_t extra;
                        zmq_msg_init(&extra);
                        zmq_msg_recv(&extra, z->handler, 0);
                        more = zmq_msg_more(&extra);
                        if (n < ZAP_FRAMES)
                                f[n++] = extra;
                        else
                                zmq_msg_close(&extra);
                }
                serve_one(z, f, n);
                for (int i = 0; i < n; i++)
                        zmq_msg_close(&f[i]);
        }
}

void hvd_zap_handle_monitor(hvd_zap_t *z) {
        for (int k = 0; z->monitor && k < ZAP_BATCH; k++) {
                zmq_msg_t ev, ep;
                zmq_msg_init(&ev);
                if (zmq_msg_recv(&ev, z->monitor, ZMQ_DONTWAIT) < 0) {
                        zmq_msg_close(&ev);
                        return;
                }
                zmq_msg_init(&ep);
                if (zmq_msg_more(&ev))
                        zmq_msg_recv(&ep, z->monitor, 0);
                uint16_t event = 0;
                uint32_t value = 0;
                if (zmq_msg_size(&ev) >= 6) {
                        memcpy(&event, zmq_msg_data(&ev), 2);
                        memcpy(&value, (uint8_t *) zmq_msg_data(&ev) + 2, 4);
                }
                const char *why = NULL;
                if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL && value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH)
                        why = "a client without CURVE (NULL or PLAIN mechanism) was refused";
                else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL && value == ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC)
                        why = "a client failed the CURVE handshake (does it pin another server key than ours?)";
                else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL)
                        why = "a client broke the handshake protocol";
                else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL && (value == EPIPE || value == ECONNRESET))
                        /* a client that sees our CURVE greeting and cannot
                         * speak it may hang up before we see its mechanism */
                        why = "a client hung up during the CURVE handshake (one without CURVE, or pinning another "
                              "server key, does that)";
                else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL)
                        why = "a client's handshake failed";
                /* FAILED_AUTH: the handler refused and logged it already */
                if (why)
                        hvd_log_warning("peer socket %.*s: %s (error 0x%" PRIx32 "); our public key is %s",
                                        (int) zmq_msg_size(&ep), (const char *) zmq_msg_data(&ep), why, value,
                                        z->public_z85);
                zmq_msg_close(&ev);
                zmq_msg_close(&ep);
        }
}
