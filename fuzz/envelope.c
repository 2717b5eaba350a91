/* envelope.c — fuzzes hvd_wire_decode(), the budgeted decode + validation
 * every socket of the daemon, the client and hvdctl goes through (worker →
 * daemon, daemon → worker, daemon ↔ daemon, control). Invariants checked
 * beyond "no crash": a failure leaves the out-parameter alone and says why;
 * an accepted message packs back to as many bytes (fields may come back
 * in another order) and that packing decodes again; hvd_wire_decode_memo()
 * gives what hvd_wire_decode() does (the same message packed, or the same
 * error), on the input with a fresh memo, again with what that taught it,
 * and on the input's tail past byte data[0] with the same memo. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "hvd.h"
#include "wire.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
        return 0;
}

/* hvd_wire_decode_memo() of the frame against hvd_wire_decode() */
static void same_with_memo(hvd_wire_memo_t *m, const uint8_t *data, size_t size) {
        Hvd__Envelope *a = NULL, *b = NULL;
        char ea[512] = "", eb[512] = "";
        int ra = hvd_wire_decode_memo(data, size, 0, m, &a, ea, sizeof ea);
        int rb = hvd_wire_decode(data, size, 0, &b, eb, sizeof eb);
        FUZZ_ASSERT(ra == rb, "with the memo %d (%s), without %d (%s)", ra, ea, rb, eb);
        if (ra < 0) {
                FUZZ_ASSERT(strcmp(ea, eb) == 0, "with the memo \"%s\", without \"%s\"", ea, eb);
                return;
        }
        size_t la = hvd__envelope__get_packed_size(a), lb = hvd__envelope__get_packed_size(b);
        FUZZ_ASSERT(la == lb, "with the memo %zu bytes packed, without %zu", la, lb);
        uint8_t *pa = malloc(la + 1), *pb = malloc(lb + 1);
        FUZZ_ASSERT(pa && pb, "out of memory");
        hvd__envelope__pack(a, pa);
        hvd__envelope__pack(b, pb);
        FUZZ_ASSERT(memcmp(pa, pb, la) == 0, "the memo's message packs otherwise");
        free(pa);
        free(pb);
        hvd_wire_free(&a);
        hvd_wire_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        hvd_wire_memo_t *m = hvd_wire_memo_new(64);
        FUZZ_ASSERT(m, "out of memory");
        same_with_memo(m, data, size);
        same_with_memo(m, data, size);
        if (size > 1)
                same_with_memo(m, data + 1 + data[0] % (size - 1), size - 1 - data[0] % (size - 1));
        hvd_wire_memo_free(&m);
        Hvd__Envelope *env = (Hvd__Envelope *) data; /* a sentinel: must survive a failure */
        char err[512] = "";
        int r = hvd_wire_decode(data, size, 0, &env, err, sizeof err);
        if (r < 0) {
                FUZZ_ASSERT(env == (Hvd__Envelope *) data, "out-parameter changed on failure");
                FUZZ_ASSERT(err[0] && strlen(err) < sizeof err, "failure without a reason");
                FUZZ_ASSERT(r == HVD_EPROTO || r == -ENOMEM, "unexpected code %d", r);
                return 0;
        }
        FUZZ_ASSERT(env && env->body_case != HVD__ENVELOPE__BODY__NOT_SET, "accepted without a body");
        size_t len = hvd__envelope__get_packed_size(env);
        FUZZ_ASSERT(len == size, "repacks to %zu bytes, not %zu", len, size);
        uint8_t *buf = malloc(len ? len : 1);
        FUZZ_ASSERT(buf, "out of memory");
        hvd__envelope__pack(env, buf);
        Hvd__Envelope *again = NULL;
        r = hvd_wire_decode(buf, len, 0, &again, err, sizeof err);
        FUZZ_ASSERT(r == 0, "re-encoded message refused: %s", err);
        hvd_wire_free(&again);
        FUZZ_ASSERT(!again, "hvd_wire_free did not clear the pointer");
        free(buf);
        hvd_wire_free(&env);
        return 0;
}
