/* statusjson.c — fuzzes hvdctl's JSON writer (tools/status_json.c) with
 * any Status a daemon could send: the input is an Envelope, unpacked by
 * protobuf-c without hvd's validation (so invalid UTF-8, control
 * characters and any 64-bit value reach the writer). Invariants: every
 * document is written, parses as JSON, and holds the epoch and each job's
 * size exactly. */
#include "config.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "hvd.pb-c.h"
#include "status_json.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
        return 0;
}

/* doc (taken) written and parsed back; returns the text (free it). */
static char *write_and_parse(json_t *doc, json_t **back) {
        FUZZ_ASSERT(doc, "no document");
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        FUZZ_ASSERT(f, "open_memstream");
        FUZZ_ASSERT(hvd_json_write(doc, f) == 0, "write failed");
        fclose(f);
        json_decref(doc);
        json_error_t e;
        *back = json_loads(buf, JSON_DECODE_INT_AS_REAL, &e);
        FUZZ_ASSERT(*back, "written JSON does not parse: %s: %.200s", e.text, buf);
        return buf;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        Hvd__Envelope *env = hvd__envelope__unpack(NULL, size, data);
        if (!env)
                return 0;
        if (env->body_case == HVD__ENVELOPE__BODY_STATUS && env->status) {
                const Hvd__Status *s = env->status;
                json_t *back;
                char *t = write_and_parse(hvd_status_to_json(s), &back);
                char want[64];
                snprintf(want, sizeof want, "\"epoch\": %" PRIu64 ",", s->epoch);
                FUZZ_ASSERT(strstr(t, want), "epoch %" PRIu64 " not written exactly", s->epoch);
                FUZZ_ASSERT(json_array_size(json_object_get(back, "jobs")) == s->n_jobs, "jobs");
                json_decref(back);
                free(t);
                for (size_t i = 0; i < s->n_jobs; i++) {
                        t = write_and_parse(hvd_job_to_json(s->jobs[i]), &back);
                        FUZZ_ASSERT(json_number_value(json_object_get(back, "size")) == (double) s->jobs[i]->size,
                                    "size");
                        json_decref(back);
                        free(t);
                }
                t = write_and_parse(hvd_jobs_to_json(s), &back);
                json_decref(back);
                free(t);
        }
        hvd__envelope__free_unpacked(env, NULL);
        return 0;
}
