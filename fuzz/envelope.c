/* envelope.c — fuzzes hvd_wire_decode(), the budgeted decode + validation
 * every socket of the daemon, the client and hvdctl goes through (worker →
 * daemon, daemon → worker, daemon ↔ daemon, control). Invariants checked
 * beyond "no crash": a failure leaves the out-parameter alone and says why;
 * an accepted message packs back to as many bytes (fields may come back
 * in another order) and that packing decodes again; its deep copy
 * (hvd_wire_dup) packs to the same bytes. */
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
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
        Hvd__Envelope *copy = (Hvd__Envelope *) hvd_wire_dup(&env->base);
        if (copy) { /* NULL: unknown fields, which it does not copy */
                uint8_t *cbuf = malloc(len ? len : 1);
                FUZZ_ASSERT(cbuf, "out of memory");
                FUZZ_ASSERT(hvd__envelope__get_packed_size(copy) == len, "the copy packs to another size");
                hvd__envelope__pack(copy, cbuf);
                FUZZ_ASSERT(memcmp(cbuf, buf, len) == 0, "the copy packs otherwise");
                free(cbuf);
                protobuf_c_message_free_unpacked(&copy->base, NULL);
        }
        free(buf);
        hvd_wire_free(&env);
        return 0;
}
