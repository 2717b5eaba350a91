/* cpubind.c — the CPU share of each rank forked on this machine (see
 * cpubind.h). Pure functions over cpu_set_t: the launcher applies the
 * result in the child, before exec. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "cpubind.h"

int hvd_cpu_bind_parse(const char *s, hvd_cpu_bind_t *ret, char *why, size_t why_len) {
        if (s && !strcmp(s, "share"))
                *ret = HVD_CPU_BIND_SHARE;
        else if (s && !strcmp(s, "none"))
                *ret = HVD_CPU_BIND_NONE;
        else {
                snprintf(why, why_len, "--cpu-bind '%s': expected 'share' or 'none'", s ? s : "");
                return -EINVAL;
        }
        return 0;
}

bool hvd_cpu_share(const cpu_set_t *avail, int index, int count, cpu_set_t *out) {
        int n = CPU_COUNT(avail);
        if (count < 2 || index < 0 || index >= count || n < count)
                return false;
        int k = n / count, first = index * k, seen = 0;
        cpu_set_t s;
        CPU_ZERO(&s);
        for (int cpu = 0; cpu < CPU_SETSIZE && seen < first + k; cpu++) {
                if (!CPU_ISSET(cpu, avail))
                        continue;
                if (seen >= first)
                        CPU_SET(cpu, &s);
                seen++;
        }
        *out = s;
        return true;
}
