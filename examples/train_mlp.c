/* train_mlp.c — the "main job": a 16-64-4 MLP trained data-parallel with hvd.
 * Every rank builds the same synthetic data set and trains on its rank::size
 * shard. Rank 0's initial weights are broadcast and gradients are averaged
 * with one asynchronous allreduce per tensor, so the weights stay
 * bit-identical on all ranks; the program checks that at the end. */

#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hvd.h"

enum { N_SAMPLES = 4096, N_IN = 16, N_HIDDEN = 64, N_CLASSES = 4 };
#define MOMENTUM 0.9f

/* The whole model is one struct of floats: a flat array for SGD and checksums. */
typedef struct mlp {
        float w1[N_HIDDEN][N_IN], b1[N_HIDDEN];
        float w2[N_CLASSES][N_HIDDEN], b2[N_CLASSES];
} mlp_t;

/* Parameter tensors as hvd sees them; the shapes must outlive each request. */
static const struct tensor {
        const char *name;
        size_t offset, count;
        int ndim;
        int64_t shape[2];
} tensors[] = {
        { "fc1.weight", offsetof(mlp_t, w1), N_HIDDEN *N_IN, 2, { N_HIDDEN, N_IN } },
        { "fc1.bias", offsetof(mlp_t, b1), N_HIDDEN, 1, { N_HIDDEN } },
        { "fc2.weight", offsetof(mlp_t, w2), N_CLASSES *N_HIDDEN, 2, { N_CLASSES, N_HIDDEN } },
        { "fc2.bias", offsetof(mlp_t, b2), N_CLASSES, 1, { N_CLASSES } },
};
#define N_TENSORS (sizeof tensors / sizeof tensors[0])

static mlp_t model, grad, velocity;
static float data_x[N_SAMPLES][N_IN];
static int data_y[N_SAMPLES];
static int order[N_SAMPLES]; /* this rank's shard, reshuffled every epoch */
static int rank, nranks;

static float *tensor_data(mlp_t *m, const struct tensor *t) {
        return (float *) ((char *) m + t->offset);
}

/* splitmix64: tiny, and gives the same numbers on every machine. */
static uint64_t rng_next(uint64_t *state) {
        uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        return z ^ (z >> 31);
}

static double rng_normal(uint64_t *r) {
        double u = ((rng_next(r) >> 11) + 1) * 0x1.0p-53; /* (0, 1] */
        double v = (rng_next(r) >> 11) * 0x1.0p-53;
        return sqrt(-2.0 * log(u)) * cos(2.0 * M_PI * v);
}

/* n values drawn from N(0, stddev^2). */
static void fill_normal(float *v, size_t n, double stddev, uint64_t *r) {
        for (size_t i = 0; i < n; i++)
                v[i] = (float) (rng_normal(r) * stddev);
}

static int argmax(const float *v, int n) {
        int best = 0;
        for (int i = 1; i < n; i++)
                if (v[i] > v[best])
                        best = i;
        return best;
}

/* Labels come from a fixed random "teacher": y = argmax(B tanh(A x)), x ~ N(0, I).
 * Only the seed matters, so every rank builds exactly the same data set. */
static void make_dataset(uint64_t seed) {
        uint64_t r = seed ^ 0xda7a5e7da7a5e7ULL;
        float a[N_IN][N_IN], b[N_CLASSES][N_IN], h[N_IN], logits[N_CLASSES];

        fill_normal(&a[0][0], N_IN * N_IN, 1.0 / sqrt(N_IN), &r); /* keeps tanh out of saturation */
        fill_normal(&b[0][0], N_CLASSES * N_IN, 1.0, &r);
        fill_normal(&data_x[0][0], N_SAMPLES * N_IN, 1.0, &r);
        for (int n = 0; n < N_SAMPLES; n++) {
                for (int i = 0; i < N_IN; i++) {
                        h[i] = 0;
                        for (int j = 0; j < N_IN; j++)
                                h[i] += a[i][j] * data_x[n][j];
                        h[i] = tanhf(h[i]);
                }
                for (int c = 0; c < N_CLASSES; c++) {
                        logits[c] = 0;
                        for (int i = 0; i < N_IN; i++)
                                logits[c] += b[c][i] * h[i];
                }
                data_y[n] = argmax(logits, N_CLASSES);
        }
}

/* He initialisation; the seed differs per rank, so only the broadcast makes the ranks agree. */
static void init_model(mlp_t *m, uint64_t seed) {
        uint64_t r = seed;

        memset(m, 0, sizeof *m); /* biases start at 0 */
        fill_normal(&m->w1[0][0], N_HIDDEN * N_IN, sqrt(2.0 / N_IN), &r);
        fill_normal(&m->w2[0][0], N_CLASSES * N_HIDDEN, sqrt(2.0 / N_HIDDEN), &r);
}

/* One sample forward: hidden pre-activations z1, class probabilities p.
 * Returns the cross-entropy loss. */
static double forward(const mlp_t *m, const float *x, int y, float *z1, float *p) {
        float max = -INFINITY, sum = 0;

        for (int h = 0; h < N_HIDDEN; h++) {
                z1[h] = m->b1[h];
                for (int i = 0; i < N_IN; i++)
                        z1[h] += m->w1[h][i] * x[i];
        }
        for (int c = 0; c < N_CLASSES; c++) {
                p[c] = m->b2[c];
                for (int h = 0; h < N_HIDDEN; h++)
                        p[c] += m->w2[c][h] * fmaxf(z1[h], 0.0f);
                max = fmaxf(max, p[c]);
        }
        for (int c = 0; c < N_CLASSES; c++)
                sum += p[c] = expf(p[c] - max); /* shifted by the max: no overflow */
        for (int c = 0; c < N_CLASSES; c++)
                p[c] /= sum;
        return -log(fmax(p[y], 1e-30));
}

/* Adds scale * d(loss)/d(params) of one sample to g. */
static void backward(const mlp_t *m, const float *x, int y, const float *z1, const float *p, float scale, mlp_t *g) {
        float dz2[N_CLASSES];

        for (int c = 0; c < N_CLASSES; c++) {
                dz2[c] = (p[c] - (c == y)) * scale;
                g->b2[c] += dz2[c];
        }
        for (int h = 0; h < N_HIDDEN; h++) {
                if (z1[h] <= 0) /* ReLU was off: no gradient flows through h */
                        continue;
                float dh = 0;
                for (int c = 0; c < N_CLASSES; c++) {
                        g->w2[c][h] += dz2[c] * z1[h];
                        dh += m->w2[c][h] * dz2[c];
                }
                g->b1[h] += dh;
                for (int i = 0; i < N_IN; i++)
                        g->w1[h][i] += dh * x[i];
        }
}

/* Prints "<what> failed: <error>[: <detail>]" for a failed hvd call; returns r.
 * detail is hvd's own message: hvd_handle_error() or hvd_last_error(). */
__attribute__((format(printf, 3, 4))) static int report(int r, const char *detail, const char *what, ...) {
        va_list ap;

        fprintf(stderr, "train_mlp: rank %d: ", rank);
        va_start(ap, what);
        vfprintf(stderr, what, ap);
        va_end(ap);
        fprintf(stderr, " failed: %s%s%s\n", hvd_strerror(r), detail && *detail ? ": " : "", detail ? detail : "");
        return r;
}

/* Averages the gradients across ranks: one asynchronous allreduce per tensor,
 * all in flight together, then waits for each. Returns 0 or the first error. */
static int allreduce_gradients(mlp_t *g) {
        hvd_handle_t *handles[N_TENSORS] = { NULL };
        char name[HVD_MAX_NAME_BYTES];
        int r = 0;

        for (size_t t = 0; t < N_TENSORS && r >= 0; t++) {
                hvd_request_t req = HVD_REQUEST_INIT;
                snprintf(name, sizeof name, "grad.%s", tensors[t].name); /* hvd copies it */
                req.name = name;
                req.output = tensor_data(g, &tensors[t]);
                req.input = req.output; /* in place */
                req.dtype = HVD_FLOAT32;
                req.ndim = tensors[t].ndim;
                req.shape = tensors[t].shape;
                req.reduce_op = HVD_REDUCE_AVERAGE;
                r = hvd_allreduce_async(&req, &handles[t]);
                if (r < 0)
                        report(r, hvd_last_error(), "submitting allreduce '%s'", name);
        }
        /* Wait for everything submitted, even after a failure: hvd writes into g until then. */
        for (size_t t = 0; t < N_TENSORS; t++) {
                if (!handles[t])
                        continue;
                int k = hvd_handle_wait(handles[t]);
                if (k < 0 && r >= 0)
                        r = report(k, hvd_handle_error(handles[t]), "allreduce 'grad.%s'", tensors[t].name);
                hvd_handle_release(&handles[t]);
        }
        return r;
}

/* Loss and accuracy of the model on the whole data set: each rank evaluates
 * its shard and the sums are added across ranks. */
static int evaluate(const mlp_t *m, double *loss, double *accuracy) {
        double sums[3] = { 0 }; /* loss, correct, samples */
        float z1[N_HIDDEN], p[N_CLASSES];

        for (int n = rank; n < N_SAMPLES; n += nranks) {
                sums[0] += forward(m, data_x[n], data_y[n], z1, p);
                sums[1] += argmax(p, N_CLASSES) == data_y[n];
                sums[2] += 1;
        }
        int r = hvd_allreduce("metrics", sums, sums, 3, HVD_FLOAT64, HVD_REDUCE_SUM);
        if (r < 0)
                return report(r, hvd_last_error(), "allreduce 'metrics'");
        *loss = sums[0] / sums[2];
        *accuracy = sums[1] / sums[2];
        return 0;
}

/* Returns 1 if the model is bit-identical on every rank, 0 if not, < 0 on error.
 * *checksum is this rank's FNV-1a hash of the weight bytes. */
static int weights_identical(const mlp_t *m, uint64_t *checksum) {
        const unsigned char *bytes = (const unsigned char *) m;
        uint64_t h = 0xcbf29ce484222325ULL;
        int64_t mine, lo, hi;
        int r;

        for (size_t i = 0; i < sizeof *m; i++)
                h = (h ^ bytes[i]) * 0x100000001b3ULL;
        memcpy(&mine, &h, sizeof mine); /* same bits, as the int64 hvd reduces */
        r = hvd_allreduce("checksum.min", &mine, &lo, 1, HVD_INT64, HVD_REDUCE_MIN);
        if (r < 0)
                return report(r, hvd_last_error(), "allreduce 'checksum.min'");
        r = hvd_allreduce("checksum.max", &mine, &hi, 1, HVD_INT64, HVD_REDUCE_MAX);
        if (r < 0)
                return report(r, hvd_last_error(), "allreduce 'checksum.max'");
        *checksum = h;
        return lo == hi;
}

/* Makes every rank start from rank 0's weights, one broadcast per tensor. */
static int broadcast_weights(mlp_t *m) {
        char name[HVD_MAX_NAME_BYTES];

        for (size_t t = 0; t < N_TENSORS; t++) {
                snprintf(name, sizeof name, "param.%s", tensors[t].name);
                int r = hvd_broadcast(name, tensor_data(m, &tensors[t]), tensors[t].count, HVD_FLOAT32, 0);
                if (r < 0)
                        return report(r, hvd_last_error(), "broadcast '%s'", name);
        }
        return 0;
}

/* One pass over this rank's shard in a fresh random order, `steps` mini-batches.
 * Every rank applies the same averaged gradient, so their weights stay equal. */
static int train_epoch(long steps, long batch, float lr, uint64_t *shuffle) {
        float z1[N_HIDDEN], p[N_CLASSES];
        float *w = (float *) &model, *g = (float *) &grad, *v = (float *) &velocity;
        int n_local = 0;

        for (int n = rank; n < N_SAMPLES; n += nranks)
                order[n_local++] = n;
        for (int i = n_local - 1; i > 0; i--) {
                int j = (int) (rng_next(shuffle) % (uint64_t) (i + 1)), tmp = order[i];
                order[i] = order[j];
                order[j] = tmp;
        }
        for (long step = 0; step < steps; step++) {
                memset(&grad, 0, sizeof grad);
                for (long k = 0; k < batch; k++) {
                        int n = order[step * batch + k];
                        forward(&model, data_x[n], data_y[n], z1, p);
                        backward(&model, data_x[n], data_y[n], z1, p, 1.0f / (float) batch, &grad);
                }
                int r = allreduce_gradients(&grad);
                if (r < 0)
                        return r;
                for (size_t i = 0; i < sizeof model / sizeof(float); i++) {
                        v[i] = MOMENTUM * v[i] + g[i];
                        w[i] -= lr * v[i];
                }
        }
        return 0;
}

static void usage(FILE *f) {
        fprintf(f, "Usage: train_mlp [OPTIONS]   (start N copies with hvdrun)\n"
                   "Trains a 16-64-4 MLP on synthetic data, data-parallel over all hvd ranks.\n\n"
                   "  -e, --epochs N      epochs to train (default 10)\n"
                   "  -b, --batch-size N  samples per step on each rank (default 32)\n"
                   "  -l, --lr F          SGD learning rate, momentum 0.9 (default 0.02)\n"
                   "  -s, --seed N        data and initialisation seed (default 42)\n"
                   "  -q, --quiet         print only the final result\n"
                   "  -h, --help          show this help\n");
}

/* Parses a number in [min, max] (a whole one if integer); exits with a message otherwise. */
static double parse_number(const char *opt, const char *s, double min, double max, int integer) {
        char *end;
        double v = strtod(s, &end);
        if (*s == '\0' || *end != '\0' || !(v >= min && v <= max) || (integer && v != floor(v))) {
                fprintf(stderr, "train_mlp: %s '%s': expected %s in [%g, %g]\n", opt, s,
                        integer ? "an integer" : "a number", min, max);
                exit(2);
        }
        return v;
}

int main(int argc, char **argv) {
        static const struct option options[] = {
                { "epochs", required_argument, NULL, 'e' },
                { "batch-size", required_argument, NULL, 'b' },
                { "lr", required_argument, NULL, 'l' },
                { "seed", required_argument, NULL, 's' },
                { "quiet", no_argument, NULL, 'q' },
                { "help", no_argument, NULL, 'h' },
                { NULL, 0, NULL, 0 },
        };
        long epochs = 10, batch = 32, seed = 42;
        double lr = 0.02, loss0 = 0, loss = 0, acc = 0;
        uint64_t checksum, shuffle;
        int quiet = 0, ret = 1, r, c;

        while ((c = getopt_long(argc, argv, "e:b:l:s:qh", options, NULL)) != -1) {
                switch (c) {
                case 'e': epochs = (long) parse_number("--epochs", optarg, 1, 100000, 1); break;
                case 'b': batch = (long) parse_number("--batch-size", optarg, 1, N_SAMPLES, 1); break;
                case 'l': lr = parse_number("--lr", optarg, 1e-6, 10, 0); break;
                case 's': seed = (long) parse_number("--seed", optarg, 0, 2147483647, 1); break;
                case 'q': quiet = 1; break;
                case 'h': usage(stdout); return 0;
                default: usage(stderr); return 2;
                }
        }
        if (optind < argc) {
                fprintf(stderr, "train_mlp: unexpected argument '%s'\n", argv[optind]);
                return 2;
        }

        r = hvd_init();
        if (r < 0) {
                report(r, hvd_last_error(), "hvd_init");
                return 1;
        }
        rank = hvd_rank();
        nranks = hvd_size();
        /* Every rank must run the same number of steps, or the allreduces would not pair up. */
        long steps = N_SAMPLES / nranks / batch;
        if (steps < 1) {
                if (rank == 0)
                        fprintf(stderr,
                                "train_mlp: --batch-size %ld is larger than a shard "
                                "(%d samples on %d ranks)\n",
                                batch, N_SAMPLES / nranks, nranks);
                goto out;
        }
        if (rank == 0 && !quiet)
                printf("train_mlp: %d ranks, %d samples (%d per rank), batch %ld per rank (%ld global), "
                       "%ld steps per epoch, lr %g\n",
                       nranks, N_SAMPLES, N_SAMPLES / nranks, batch, batch * nranks, steps, lr);

        make_dataset((uint64_t) seed);
        init_model(&model, (uint64_t) seed + (uint64_t) rank);
        r = weights_identical(&model, &checksum);
        if (r < 0)
                goto out;
        if (rank == 0 && !quiet)
                printf("before broadcast: initial weights %s on the %d ranks\n", r ? "identical" : "differ", nranks);
        if (broadcast_weights(&model) < 0)
                goto out;

        shuffle = (uint64_t) seed * 1000003u + (uint64_t) rank; /* batch order may differ per rank */
        for (long epoch = 0; epoch <= epochs; epoch++) {        /* epoch 0: the untrained model */
                if (epoch > 0 && train_epoch(steps, batch, (float) lr, &shuffle) < 0)
                        goto out;
                if (evaluate(&model, &loss, &acc) < 0)
                        goto out;
                if (epoch == 0)
                        loss0 = loss;
                if (rank == 0 && !quiet)
                        printf("epoch %ld loss %.4f accuracy %.3f\n", epoch, loss, acc);
        }

        r = weights_identical(&model, &checksum);
        if (r < 0)
                goto out;
        if (r == 0) {
                fprintf(stderr,
                        "train_mlp: rank %d: final weights differ across ranks (checksum here 0x%016" PRIx64 ")\n",
                        rank, checksum);
                goto out;
        }
        if (!(loss < loss0)) {
                if (rank == 0)
                        fprintf(stderr, "train_mlp: loss did not fall: %.4f at the start, %.4f at the end\n", loss0,
                                loss);
                goto out;
        }
        if (rank == 0)
                printf("final weights identical on all %d ranks (checksum 0x%016" PRIx64 ")\n", nranks, checksum);
        ret = 0;
out:
        r = hvd_shutdown();
        if (r < 0 && ret == 0) {
                report(r, hvd_last_error(), "hvd_shutdown");
                ret = 1;
        }
        return ret;
}
