/* error.c — hvd_strerror(): one table for -errno and HVD_E* codes. */
#include "config.h"

#include <string.h>

#include "hvd.h"

const char *hvd_strerror(int err) {
        switch (err) {
#define HVD_ERR_CASE(name, value, text)                                                                                \
        case value: return text;
                HVD_ERRORS(HVD_ERR_CASE)
#undef HVD_ERR_CASE
        case 0: return "Success";
        default:
                if (err < 0 && err > -4096)
                        return strerror(-err);
                return "Unknown error";
        }
}
