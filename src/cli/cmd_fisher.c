/* `dsflash fisher A B C D` (TOOLS.md §6.5): the two-sided Fisher exact p-value of [[A,B],[C,D]],
 * e.g. to compare two clean or pass rates.  Why a self-test at every start: a p-value printed by
 * a broken routine looks like any other number, so the tool checks itself against textbook tables
 * first and refuses to answer (exit 1) if one disagrees.  Exit: 0 printed, 1 self-test failed,
 * 2 usage. */
#include "base/flags.h"
#include "cli/commands.h"
#include "tools/gate_logic.h"
#include <stdio.h>

static ds_flag k_flags[] = {
    {.name = "--json", .type = DS_FLAG_SWITCH, .help = "print {\"table\",\"p\"} as JSON instead of text"},
};

int cmd_fisher(int argc, char **argv) {
    ds_flagset fs = {.cmd = "dsflash fisher",
                     .usage = "usage: dsflash fisher A B C D [--json]   (non-negative counts of the table [[A,B],[C,D]])",
                     .flags = k_flags, .n = DS_ARRAY_LEN(k_flags), .max_positional = 4,
                     .positional_name = "A B C D"};
    int prc = ds_flags_parse(&fs, argc, argv, 1, stderr);
    if (prc) return prc == 1 ? 0 : 2;
    if (fs.n_positional != 4) {
        fprintf(stderr, "dsflash fisher: expected 4 counts A B C D, got %d\n%s\n", fs.n_positional, fs.usage);
        return 2;
    }
    int64_t t[4];
    for (int i = 0; i < 4; i++)
        if (ds_parse_int_range(fs.positional[i], 0, 1000000000, &t[i])) {
            fprintf(stderr, "dsflash fisher: count %c: expected an integer in [0, 1000000000], got '%s'\n", 'A' + i,
                    fs.positional[i]);
            return 2;
        }
    char msg[256];
    if (ds_fisher_selftest(msg, sizeof msg)) {
        fprintf(stderr, "dsflash fisher: refusing to run: %s\n", msg);
        return 1;
    }
    double p = ds_fisher_two_sided(t[0], t[1], t[2], t[3]);
    if (ds_flag_on(&fs, "--json"))
        printf("{\"table\":[[%lld,%lld],[%lld,%lld]],\"p\":%.10g}\n", (long long)t[0], (long long)t[1], (long long)t[2],
               (long long)t[3], p);
    else
        printf("Fisher exact (two-sided) [[%lld,%lld],[%lld,%lld]]: p = %.6g\n", (long long)t[0], (long long)t[1],
               (long long)t[2], (long long)t[3], p);
    return 0;
}
