/* Shared helpers of the probe commands (see probe_cli.h). */
#include "cli/probe_cli.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ds_probe_cli_int_list(const char *cmd, const char *flag, const char *text, int64_t *out, int max) {
    int n = 0;
    const char *p = text;
    while (*p) {
        char *end;
        long long v = strtoll(p, &end, 10);
        int64_t mul = 1;
        if (end != p && (*end == 'k' || *end == 'K')) mul = 1000, end++;
        if (end == p || v <= 0 || (*end && *end != ',') || n == max) {
            fprintf(stderr, "%s: %s: expected up to %d positive integers separated by commas, got '%s'\n", cmd, flag,
                    max, text);
            return -1;
        }
        out[n++] = (int64_t)v * mul;
        p = *end ? end + 1 : end;
    }
    if (!n) fprintf(stderr, "%s: %s: empty list\n", cmd, flag);
    return n ? n : -1;
}
