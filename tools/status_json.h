/* status_json.h — hvdctl's --json output: a daemon's Status, its job list
 * and one job as the JSON documents hvdctl(1) describes (field names are
 * hvd.proto's), built with jansson. */
#ifndef HVD_STATUS_JSON_H
#define HVD_STATUS_JSON_H

#include <jansson.h>
#include <stdio.h>

#include "hvd.pb-c.h"

/* The documents of `status --json`, `jobs --json` and `job ID --json`.
 * Strings that are not UTF-8 get U+FFFD for each bad byte; NaN and
 * infinities become 0. Return a new reference (json_decref it), or NULL
 * when memory ran out. Write them with hvd_json_write(): integers above
 * INT64_MAX are held in a way only it writes right. */
json_t *hvd_status_to_json(const Hvd__Status *s);
json_t *hvd_jobs_to_json(const Hvd__Status *s);
json_t *hvd_job_to_json(const Hvd__JobStatus *j);

/* Writes v indented by two spaces, then a newline. Returns 0, -ENOMEM or
 * -EIO (a write failed). */
int hvd_json_write(const json_t *v, FILE *f);

#endif
