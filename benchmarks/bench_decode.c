/* bench_decode — what a daemon spends decoding its workers' first-step
 * readiness: one Ready frame holding a model's gradients as requests by
 * name (a first step sent in one batch), decoded plainly
 * (hvd_wire_decode) and through the daemon's memo of recent requests
 * (hvd_wire_decode_memo) once it holds them, as for every local rank of a
 * host after the first. Medians of --rounds rounds of --frames decodes;
 * one line:
 *   bench=decode model=M requests=N frame_bytes=B plain_us=.. memo_us=.. memo_first_us=..
 *   memo_unlearned_us=.. ratio=..
 * (memo_first_us: the decode that remembers them; memo_unlearned_us: a
 * frame the memo does not hold, with learning off, as for a daemon with
 * one local worker)
 *   bench_decode --model FILE.tsv [--frames N] [--rounds N] */
#include "config.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hvd.h"
#include "step_model.h"
#include "wire.h"

static void usage(void) {
        fprintf(stderr, "usage: bench_decode --model FILE.tsv [--frames N] [--rounds N]\n");
        exit(2);
}

static void decode_or_die(const uint8_t *buf, size_t len, hvd_wire_memo_t *memo) {
        Hvd__Envelope *env = NULL;
        char err[256];
        if (hvd_wire_decode_memo(buf, len, 0, memo, &env, err, sizeof err) < 0) {
                fprintf(stderr, "bench: decode: %s\n", err);
                exit(1);
        }
        hvd_wire_free(&env);
}

int main(int argc, char **argv) {
        const char *model = NULL;
        int frames = 2000, rounds = 5;
        static const struct option opts[] = { { "model", required_argument, NULL, 'm' },
                                              { "frames", required_argument, NULL, 'f' },
                                              { "rounds", required_argument, NULL, 'r' },
                                              { NULL, 0, NULL, 0 } };
        for (int c; (c = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
                if (c == 'm')
                        model = optarg;
                else if (c == 'f')
                        frames = atoi(optarg);
                else if (c == 'r')
                        rounds = atoi(optarg);
                else
                        usage();
        }
        if (!model || frames < 1 || rounds < 1 || rounds > 64)
                usage();
        step_model_t m = { 0 };
        if (step_model_load(model, &m) < 0) {
                fprintf(stderr, "bench: cannot load %s\n", model);
                return 1;
        }
        /* the gradients in backward order, as a client asks for them */
        Hvd__Request *req = calloc(m.n, sizeof *req), **rp = calloc(m.n, sizeof *rp);
        if (!req || !rp)
                return 1;
        for (size_t i = 0; i < m.n; i++) {
                const step_tensor_t *t = &m.t[m.n - 1 - i];
                hvd__request__init(&req[i]);
                req[i].name = t->name;
                req[i].kind = HVD__KIND__KIND_ALLREDUCE;
                req[i].dtype = HVD_FLOAT32;
                req[i].reduce_op = HVD_REDUCE_AVERAGE;
                req[i].device = HVD_DEVICE_CPU;
                req[i].prescale = req[i].postscale = 1.0;
                req[i].shape = (int64_t *) t->shape;
                req[i].n_shape = (size_t) t->ndim;
                rp[i] = &req[i];
        }
        Hvd__Ready ready = HVD__READY__INIT;
        ready.requests = rp;
        ready.n_requests = m.n;
        Hvd__Envelope env = HVD__ENVELOPE__INIT;
        env.version = HVD_PROTOCOL_VERSION;
        env.body_case = HVD__ENVELOPE__BODY_READY;
        env.ready = &ready;
        size_t len = hvd__envelope__get_packed_size(&env);
        uint8_t *buf = malloc(len);
        if (!buf)
                return 1;
        hvd__envelope__pack(&env, buf);
        double plain[64], memo[64], first[64], unlearned[64];
        for (int r = 0; r < rounds; r++) {
                double t0 = step_now_sec();
                for (int k = 0; k < frames; k++)
                        decode_or_die(buf, len, NULL);
                double t1 = step_now_sec();
                hvd_wire_memo_t *mm = hvd_wire_memo_new(4096);
                if (!mm)
                        return 1;
                decode_or_die(buf, len, mm); /* learns them */
                double t2 = step_now_sec();
                for (int k = 0; k < frames; k++)
                        decode_or_die(buf, len, mm);
                double t3 = step_now_sec();
                hvd_wire_memo_free(&mm);
                if (!(mm = hvd_wire_memo_new(4096)))
                        return 1;
                hvd_wire_memo_set_learning(mm, false);
                double t4 = step_now_sec();
                for (int k = 0; k < frames; k++)
                        decode_or_die(buf, len, mm);
                double t5 = step_now_sec();
                hvd_wire_memo_free(&mm);
                unlearned[r] = (t5 - t4) * 1e6 / frames;
                plain[r] = (t1 - t0) * 1e6 / frames;
                first[r] = (t2 - t1) * 1e6;
                memo[r] = (t3 - t2) * 1e6 / frames;
        }
        char label[64];
        double p = step_median(plain, rounds), q = step_median(memo, rounds);
        printf("bench=decode model=%s requests=%zu frame_bytes=%zu plain_us=%.2f memo_us=%.2f memo_first_us=%.2f "
               "memo_unlearned_us=%.2f ratio=%.2f\n",
               step_model_label(model, label, sizeof label), m.n, len, p, q, step_median(first, rounds),
               step_median(unlearned, rounds), p / q);
        free(buf);
        free(req);
        free(rp);
        step_model_free(&m);
        return 0;
}
