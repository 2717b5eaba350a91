/* dataset.h — train_mlp's data: the handwritten digits scikit-learn ships
 * (1,797 8x8 images, 10 classes) or a synthetic stand-in of the same shape,
 * and their split into a training and a held-out set. */
#ifndef HVD_EXAMPLES_DATASET_H
#define HVD_EXAMPLES_DATASET_H

#include <stddef.h>
#include <stdint.h>

enum {
        DATASET_FEATURES = 64, /* 8x8 pixels */
        DATASET_CLASSES = 10,
        DATASET_MAX_SAMPLES = 100000, /* a larger file is refused, not allocated */
};

/* Where Debian's python3-sklearn puts the digits (scikit-learn's load_digits reads it). */
#define DATASET_DIGITS_PATH "/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz"

typedef struct dataset {
        int n;                        /* samples */
        float (*x)[DATASET_FEATURES]; /* n rows of features scaled to [0, 1] */
        int *y;                       /* n labels in [0, DATASET_CLASSES) */
} dataset_t;

/* Reads scikit-learn's digits.csv.gz: one sample a line, 64 pixel values in
 * [0, 16] then the label, comma-separated. Returns 0 and fills *ds (free
 * with dataset_free), or -1 with *ds untouched and a message naming the file
 * and line in err. Without zlib at build time it always fails and says so. */
int dataset_load_digits(const char *path, dataset_t *ds, char *err, size_t err_bytes);

/* n samples of a fixed random "teacher" network's classes (labels
 * argmax(B tanh(A x)), x ~ N(0, I)); only the seed matters. Returns 0, or
 * -1 when out of memory (*ds untouched). */
int dataset_synthetic(dataset_t *ds, int n, uint64_t seed);

/* Shuffles ds's samples in place, the same way for the same seed, so that
 * its first n_train rows are a training set and the rest a held-out set. */
void dataset_shuffle(dataset_t *ds, uint64_t seed);

/* Frees what ds holds and zeroes it; takes a zeroed or freed ds. */
void dataset_free(dataset_t *ds);

#endif
