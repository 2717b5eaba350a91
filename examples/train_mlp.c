/* train_mlp.c — the "main job": a 64-64-10 MLP trained data-parallel with hvd
 * on scikit-learn's handwritten digits (or, with --synthetic, generated data
 * of the same shape). Every rank loads the same data, splits it the same way
 * (a fixed seed) into a training and a held-out set, and trains on its
 * rank::size shard of the training set. Rank 0's initial weights are
 * broadcast and gradients are averaged with one asynchronous allreduce per
 * tensor, so the weights stay bit-identical on all ranks; the program checks
 * that at the end by gathering every rank's checksum. */

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dataset.h"
#include "hvd.h"
#include "rng.h"

enum { N_IN = DATASET_FEATURES, N_HIDDEN = 64, N_CLASSES = DATASET_CLASSES, N_SYNTHETIC = 2048, MAX_EPOCHS = 100000 };
#define MOMENTUM         0.9f
#define HELDOUT_FRACTION 0.2 /* of the samples, kept out of training to measure accuracy */

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
static dataset_t data; /* rows [0, n_train) train, [n_train, data.n) are held out */
static int n_train;
static int *order; /* this rank's shard of the training set, reshuffled every epoch */
static int rank, nranks;

static float *tensor_data(mlp_t *m, const struct tensor *t) {
        return (float *) ((char *) m + t->offset);
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

static uint64_t now_usec(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000000u + (uint64_t) ts.tv_nsec / 1000u;
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

/* The model's mean loss on the training set and its loss and accuracy on the
 * held-out set: each rank evaluates its shard of both and the sums are added
 * across ranks. */
static int evaluate(const mlp_t *m, double *train_loss, double *heldout_loss, double *heldout_accuracy) {
        double sums[5] = { 0 }; /* training loss, samples; held-out loss, correct, samples */
        float z1[N_HIDDEN], p[N_CLASSES];

        for (int n = rank; n < data.n; n += nranks) {
                double loss = forward(m, data.x[n], data.y[n], z1, p);
                if (n < n_train) {
                        sums[0] += loss;
                        sums[1] += 1;
                } else {
                        sums[2] += loss;
                        sums[3] += argmax(p, N_CLASSES) == data.y[n];
                        sums[4] += 1;
                }
        }
        int r = hvd_allreduce("metrics", sums, sums, 5, HVD_FLOAT64, HVD_REDUCE_SUM);
        if (r < 0)
                return report(r, hvd_last_error(), "allreduce 'metrics'");
        *train_loss = sums[0] / sums[1];
        *heldout_loss = sums[2] / sums[4];
        *heldout_accuracy = sums[3] / sums[4];
        return 0;
}

/* FNV-1a over the weights' bytes: equal checksums, equal weights (to 2^-64). */
static uint64_t weights_checksum(const mlp_t *m) {
        const unsigned char *bytes = (const unsigned char *) m;
        uint64_t h = 0xcbf29ce484222325ULL;

        for (size_t i = 0; i < sizeof *m; i++)
                h = (h ^ bytes[i]) * 0x100000001b3ULL;
        return h;
}

/* Gathers every rank's checksum into sums[0..nranks) (rank order). Returns 1
 * if they are all equal, 0 if not, < 0 on error. */
static int weights_identical(const mlp_t *m, uint64_t *sums) {
        hvd_request_t req = HVD_REQUEST_INIT;
        hvd_handle_t *handle = NULL;
        const int64_t shape[1] = { 1 };
        uint64_t mine = weights_checksum(m);
        const void *out;
        size_t bytes;
        int r, ndim;

        req.name = "checksums";
        req.input = &mine; /* the same bits, as the int64 hvd gathers */
        req.dtype = HVD_INT64;
        req.ndim = 1;
        req.shape = shape;
        r = hvd_allgather_async(&req, &handle);
        if (r < 0)
                return report(r, hvd_last_error(), "submitting allgather 'checksums'");
        r = hvd_handle_wait(handle);
        if (r < 0) {
                report(r, hvd_handle_error(handle), "allgather 'checksums'");
                goto out;
        }
        r = hvd_handle_output(handle, 0, &out, &bytes, &ndim, NULL);
        if (r < 0 || bytes != (size_t) nranks * sizeof *sums) {
                r = report(r < 0 ? r : -EPROTO, "", "allgather 'checksums': %zu bytes", bytes);
                goto out;
        }
        memcpy(sums, out, bytes);
        r = 1;
        for (int i = 0; i < nranks; i++)
                if (sums[i] != mine)
                        r = 0;
out:
        hvd_handle_release(&handle);
        return r;
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

        for (int n = rank; n < n_train; n += nranks)
                order[n_local++] = n;
        for (int i = n_local - 1; i > 0; i--) {
                int j = (int) rng_below(shuffle, (uint32_t) i + 1), tmp = order[i];
                order[i] = order[j];
                order[j] = tmp;
        }
        for (long step = 0; step < steps; step++) {
                memset(&grad, 0, sizeof grad);
                for (long k = 0; k < batch; k++) {
                        int n = order[step * batch + k];
                        forward(&model, data.x[n], data.y[n], z1, p);
                        backward(&model, data.x[n], data.y[n], z1, p, 1.0f / (float) batch, &grad);
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
                   "Trains a 64-64-10 MLP on handwritten digits, data-parallel over all hvd ranks,\n"
                   "and reports its accuracy on held-out digits after every epoch.\n\n"
                   "  -d, --data FILE     the digits, scikit-learn's digits.csv.gz (default\n"
                   "                      " DATASET_DIGITS_PATH ",\n"
                   "                      from Debian's python3-sklearn)\n"
                   "  -S, --synthetic     train on generated data of the same shape instead\n"
                   "  -e, --epochs N      epochs to train (default 10)\n"
                   "  -b, --batch-size N  samples per step on each rank (default 32)\n"
                   "  -l, --lr F          SGD learning rate of one rank, momentum 0.9; multiplied\n"
                   "                      by the number of ranks, as the global batch is (default 0.02)\n"
                   "  -s, --seed N        split, shuffle and initialisation seed (default 42)\n"
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

/* The median of n values (sorts them). */
static double median(double *v, long n) {
        for (long i = 1; i < n; i++)
                for (long j = i; j > 0 && v[j - 1] > v[j]; j--) {
                        double t = v[j];
                        v[j] = v[j - 1];
                        v[j - 1] = t;
                }
        return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Loads the data set every rank loads alike; returns 0 or -1 (said why). */
static int load_data(const char *path, int synthetic, uint64_t seed) {
        char err[512];

        if (synthetic) {
                if (dataset_synthetic(&data, N_SYNTHETIC, seed) < 0) {
                        fprintf(stderr, "train_mlp: rank %d: out of memory for %d samples\n", rank, N_SYNTHETIC);
                        return -1;
                }
        } else if (dataset_load_digits(path, &data, err, sizeof err) < 0) {
                fprintf(stderr, "train_mlp: rank %d: %s\n", rank, err);
                return -1;
        }
        dataset_shuffle(&data, seed);
        n_train = data.n - (int) (data.n * HELDOUT_FRACTION);
        return 0;
}

int main(int argc, char **argv) {
        static const struct option options[] = {
                { "data", required_argument, NULL, 'd' },
                { "synthetic", no_argument, NULL, 'S' },
                { "epochs", required_argument, NULL, 'e' },
                { "batch-size", required_argument, NULL, 'b' },
                { "lr", required_argument, NULL, 'l' },
                { "seed", required_argument, NULL, 's' },
                { "quiet", no_argument, NULL, 'q' },
                { "help", no_argument, NULL, 'h' },
                { NULL, 0, NULL, 0 },
        };
        const char *path = DATASET_DIGITS_PATH;
        long epochs = 10, batch = 32, seed = 42;
        double lr = 0.02, loss0 = 0, loss = 0, heldout_loss = 0, acc = 0, *epoch_ms = NULL;
        uint64_t shuffle, *checksums = NULL;
        int synthetic = 0, quiet = 0, ret = 1, r, c;

        while ((c = getopt_long(argc, argv, "d:Se:b:l:s:qh", options, NULL)) != -1) {
                switch (c) {
                case 'd': path = optarg; break;
                case 'S': synthetic = 1; break;
                case 'e': epochs = (long) parse_number("--epochs", optarg, 1, MAX_EPOCHS, 1); break;
                case 'b': batch = (long) parse_number("--batch-size", optarg, 1, DATASET_MAX_SAMPLES, 1); break;
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
        if (load_data(path, synthetic, (uint64_t) seed) < 0)
                goto out;
        /* Every rank must run the same number of steps, or the allreduces would not pair up. */
        long steps = n_train / nranks / batch;
        if (steps < 1) {
                if (rank == 0)
                        fprintf(stderr,
                                "train_mlp: --batch-size %ld is larger than a shard "
                                "(%d samples on %d ranks)\n",
                                batch, n_train / nranks, nranks);
                goto out;
        }
        order = calloc((size_t) (n_train / nranks + 1), sizeof *order);
        checksums = calloc((size_t) nranks, sizeof *checksums);
        epoch_ms = calloc((size_t) epochs, sizeof *epoch_ms);
        if (!order || !checksums || !epoch_ms) {
                fprintf(stderr, "train_mlp: rank %d: out of memory\n", rank);
                goto out;
        }
        lr *= nranks;
        if (rank == 0 && !quiet)
                printf("train_mlp: %s: %d samples, %d to train (%d per rank), %d held out; %d ranks, "
                       "batch %ld per rank (%ld global), %ld steps per epoch, lr %g\n",
                       synthetic ? "synthetic data" : path, data.n, n_train, n_train / nranks, data.n - n_train, nranks,
                       batch, batch * nranks, steps, lr);

        init_model(&model, (uint64_t) seed + (uint64_t) rank);
        r = weights_identical(&model, checksums);
        if (r < 0)
                goto out;
        if (rank == 0 && !quiet)
                printf("before broadcast: initial weights %s on the %d ranks\n", r ? "identical" : "differ", nranks);
        if (broadcast_weights(&model) < 0)
                goto out;

        shuffle = (uint64_t) seed * 1000003u + (uint64_t) rank; /* batch order may differ per rank */
        for (long epoch = 0; epoch <= epochs; epoch++) {        /* epoch 0: the untrained model */
                if (epoch > 0) {
                        uint64_t t0 = now_usec();
                        if (train_epoch(steps, batch, (float) lr, &shuffle) < 0)
                                goto out;
                        epoch_ms[epoch - 1] = (double) (now_usec() - t0) / 1000.0;
                }
                if (evaluate(&model, &loss, &heldout_loss, &acc) < 0)
                        goto out;
                if (epoch == 0)
                        loss0 = loss;
                if (rank == 0 && !quiet) {
                        printf("epoch %ld loss %.4f held-out loss %.4f accuracy %.3f", epoch, loss, heldout_loss, acc);
                        if (epoch > 0)
                                printf(" (%.1f ms)", epoch_ms[epoch - 1]);
                        printf("\n");
                }
        }

        r = weights_identical(&model, checksums);
        if (r < 0)
                goto out;
        if (rank == 0) {
                printf("held-out accuracy %.3f after %ld epochs (%d held-out samples)\n", acc, epochs,
                       data.n - n_train);
                printf("time per epoch %.1f ms (median of %ld epochs, %d rank%s)\n", median(epoch_ms, epochs), epochs,
                       nranks, nranks == 1 ? "" : "s");
                printf("weights checksum per rank:");
                for (int i = 0; i < nranks; i++)
                        printf(" %d:0x%016" PRIx64, i, checksums[i]);
                printf("\n");
        }
        if (r == 0) {
                fprintf(stderr,
                        "train_mlp: rank %d: final weights differ across ranks (checksum here 0x%016" PRIx64 ")\n",
                        rank, checksums[rank]);
                goto out;
        }
        if (!(loss < loss0)) {
                if (rank == 0)
                        fprintf(stderr, "train_mlp: loss did not fall: %.4f at the start, %.4f at the end\n", loss0,
                                loss);
                goto out;
        }
        if (rank == 0)
                printf("final weights identical on all %d rank%s (checksum 0x%016" PRIx64 ")\n", nranks,
                       nranks == 1 ? "" : "s", checksums[0]);
        ret = 0;
out:
        r = hvd_shutdown();
        if (r < 0 && ret == 0) {
                report(r, hvd_last_error(), "hvd_shutdown");
                ret = 1;
        }
        free(order);
        free(checksums);
        free(epoch_ms);
        dataset_free(&data);
        return ret;
}
