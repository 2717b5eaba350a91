/* strmap.h — a small open-addressing hash map from byte strings to
 * pointers, used for tensor names, job ids and routing ids. The map owns
 * copies of its keys, never the values. Not thread-safe. */
#ifndef HVD_STRMAP_H
#define HVD_STRMAP_H

#include <stddef.h>

typedef struct hvd_strmap hvd_strmap_t;

hvd_strmap_t *hvd_strmap_new(void);
void hvd_strmap_destroy(hvd_strmap_t **m); /* NULL-safe; values untouched */
/* Inserts or replaces. Returns 0 or -ENOMEM. */
int hvd_strmap_put(hvd_strmap_t *m, const void *key, size_t key_len, void *value);
void *hvd_strmap_get(const hvd_strmap_t *m, const void *key, size_t key_len);
/* Removes and returns the value (NULL if absent). */
void *hvd_strmap_remove(hvd_strmap_t *m, const void *key, size_t key_len);
size_t hvd_strmap_size(const hvd_strmap_t *m);
/* Iteration: *iter starts at 0; returns 0 at the end. */
int hvd_strmap_next(const hvd_strmap_t *m, size_t *iter, const void **key, size_t *key_len, void **value);

#endif
