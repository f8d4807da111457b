/* The flag-table parser (base/flags.h): every type's accepted forms and limits, the exact message
 * of each kind of error (the strings users see), aliases, refusals, --name=value, positionals and
 * the shared integer/id parsers.  Expected values are written out by hand (4 GiB = 4294967296). */
#include "check.h"
#include "base/flags.h"

static ds_flag g_rows[] = {
    {.name = "--max-num-seqs", .type = DS_FLAG_INT, .def = "32", .lo = 1, .hi = 4096},
    {.name = "--kv", .type = DS_FLAG_SIZE},
    {.name = "--kv-bytes", .type = DS_FLAG_SIZE, .alias_of = "--kv"},
    {.name = "--util", .type = DS_FLAG_DOUBLE, .def = "0.90", .dlo = 0, .dhi = 1, .lo_open = true},
    {.name = "--numerics", .type = DS_FLAG_ENUM, .def = "fast", .choices = "exact|fast"},
    {.name = "--mode", .type = DS_FLAG_ENUM, .def = "ordered", .choices = "ordered|fast", .refuse = "one process"},
    {.name = "--tp", .type = DS_FLAG_INT, .def = "1", .lo = 1, .hi = 8, .refuse = "one process"},
    {.name = "--spec", .type = DS_FLAG_STRING, .refuse = "no speculation"},
    {.name = "--name", .type = DS_FLAG_STRING},
    {.name = "--quick", .type = DS_FLAG_SWITCH},
};

/* Parse a space-separated command line; returns the status and the error text in `err`. */
static int run(ds_flagset *fs, const char *line, char *err, size_t n) {
    char buf[512], *argv[32];
    int argc = 0;
    snprintf(buf, sizeof buf, "cmd %s", line);
    for (char *sv, *t = strtok_r(buf, " ", &sv); t && argc < 32; t = strtok_r(NULL, " ", &sv)) argv[argc++] = t;
    char *mem = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&mem, &len);
    *fs = (ds_flagset){.cmd = "dsflash test", .usage = "usage: dsflash test", .flags = g_rows, .n = DS_ARRAY_LEN(g_rows),
                       .max_positional = 1};
    int rc = ds_flags_parse(fs, argc, argv, 1, f);
    fclose(f);
    char *nl = strchr(mem, '\n');
    snprintf(err, n, "%.*s", nl ? (int)(nl - mem) : (int)len, mem);
    free(mem);
    return rc;
}

TEST(flags_defaults_and_values) {
    ds_flagset fs;
    char err[512];
    CHECK(run(&fs, "", err, sizeof err) == 0, "%s", err);
    CHECK(ds_flag_int(&fs, "--max-num-seqs") == 32 && !ds_flag_given(&fs, "--max-num-seqs"));
    CHECK(ds_flag_double(&fs, "--util") == 0.90);
    CHECK(ds_flag_int(&fs, "--numerics") == 1 && !strcmp(ds_flag_str(&fs, "--numerics"), "fast"));
    CHECK(ds_flag_str(&fs, "--kv") == NULL && !ds_flag_on(&fs, "--quick"));
    CHECK(run(&fs, "--max-num-seqs 4096 --kv 4GiB --util=1 --numerics exact --quick dir", err, sizeof err) == 0, "%s", err);
    CHECK(ds_flag_int(&fs, "--max-num-seqs") == 4096 && ds_flag_given(&fs, "--max-num-seqs"));
    CHECK(ds_flag_int(&fs, "--kv") == 4294967296LL);
    CHECK(ds_flag_double(&fs, "--util") == 1.0 && ds_flag_int(&fs, "--numerics") == 0 && ds_flag_on(&fs, "--quick"));
    CHECK(fs.n_positional == 1 && !strcmp(fs.positional[0], "dir"));
    const struct { const char *text; long long bytes; } sizes[] = {
        {"1", 1}, {"512K", 524288}, {"3MiB", 3145728}, {"1500KB", 1500000}, {"2gb", 2000000000}, {"1T", 1099511627776LL}};
    for (size_t i = 0; i < DS_ARRAY_LEN(sizes); i++) {
        char line[64];
        snprintf(line, sizeof line, "--kv %s", sizes[i].text);
        CHECK(run(&fs, line, err, sizeof err) == 0 && ds_flag_int(&fs, "--kv") == sizes[i].bytes, "%s -> %lld (%s)",
              sizes[i].text, (long long)ds_flag_int(&fs, "--kv"), err);
    }
}

TEST(flags_error_messages_name_flag_value_and_expectation) {
    const struct { const char *line, *msg; } cases[] = {
        {"--max-num-seqs x", "dsflash test: --max-num-seqs: expected an integer in [1, 4096], got 'x'"},
        {"--max-num-seqs 4097", "dsflash test: --max-num-seqs: expected an integer in [1, 4096], got '4097'"},
        {"--max-num-seqs 3.5", "dsflash test: --max-num-seqs: expected an integer in [1, 4096], got '3.5'"},
        {"--kv 4Gx", "dsflash test: --kv: expected a size of at least 1 byte (suffixes K, M, G, T, KiB.., KB..), got '4Gx'"},
        {"--kv 0", "dsflash test: --kv: expected a size of at least 1 byte (suffixes K, M, G, T, KiB.., KB..), got '0'"},
        {"--util 0", "dsflash test: --util: expected a number in (0, 1], got '0'"},
        {"--util nan", "dsflash test: --util: expected a number in (0, 1], got 'nan'"},
        {"--numerics exactly", "dsflash test: --numerics: expected exact or fast, got 'exactly'"},
        {"--mode fast", "dsflash test: --mode: expected ordered (one process), got 'fast'"},
        {"--tp 2", "dsflash test: --tp: expected 1 (one process), got '2'"},
        {"--spec banana", "dsflash test: --spec: not accepted (no speculation), got 'banana'"},
        {"--max-num-seq 4", "dsflash test: --max-num-seq: unknown option (long options must match exactly)"},
        {"--max-num-seqs", "dsflash test: --max-num-seqs needs a value"},
        {"--quick=1", "dsflash test: --quick takes no value, got '1'"},
        {"-q", "dsflash test: -q: unknown option (long options only, exact names)"},
        {"a b", "dsflash test: unexpected argument 'b' (at most 1 positional argument)"},
        {"--kv 1G --kv-bytes 2G", "dsflash test: --kv-bytes: given twice with different values ('1G', then '2G'; aliases count as the same flag)"},
        {"--name ", "dsflash test: --name needs a value"},
    };
    for (size_t i = 0; i < DS_ARRAY_LEN(cases); i++) {
        ds_flagset fs;
        char err[512];
        int rc = run(&fs, cases[i].line, err, sizeof err);
        CHECK(rc == 2, "'%s': status %d", cases[i].line, rc);
        CHECK(!strcmp(err, cases[i].msg), "'%s':\n     got  %s\n     want %s", cases[i].line, err, cases[i].msg);
    }
}

TEST(flags_aliases_refusals_and_help) {
    ds_flagset fs;
    char err[512];
    CHECK(run(&fs, "--kv-bytes 2KiB", err, sizeof err) == 0, "%s", err);
    CHECK(ds_flag_int(&fs, "--kv") == 2048 && ds_flag_given(&fs, "--kv"), "alias sets its target");
    CHECK(run(&fs, "--kv 1K --kv-bytes 1K", err, sizeof err) == 0, "same value twice through an alias: %s", err);
    CHECK(run(&fs, "--tp 01 --mode ordered", err, sizeof err) == 0, "the default value of a refused flag: %s", err);
    CHECK(run(&fs, "--help", err, sizeof err) == 1);
}

TEST(parse_int_list_kilo_and_limits) {
    int64_t v[4];
    char why[200];
    CHECK(ds_parse_int_list("8k, 500,2K", 1, 100000, "a dose", 1, v, 4, why, sizeof why) == 3 && v[0] == 8000 &&
          v[1] == 500 && v[2] == 2000);
    CHECK(ds_parse_int_list("200k", 1, 100000, "a dose", 1, v, 4, why, sizeof why) == -1);
    CHECK(!strcmp(why, "'200k' at offset 0: expected a dose in [1, 100000]"), "%s", why);
    CHECK(ds_parse_int_list("8k", 1, 100000, "a count", 0, v, 4, why, sizeof why) == -1);   /* no suffix allowed */
    CHECK(ds_parse_int_list("1,2,3,4,5", 1, 9, "a count", 0, v, 4, why, sizeof why) == -1);
    CHECK(!strcmp(why, "'5' at offset 8: too many items"), "%s", why);
    CHECK(ds_parse_int_list(" ", 1, 9, "a count", 0, v, 4, why, sizeof why) == -1 && strstr(why, "at least one item"));
    CHECK(ds_parse_int_list("k", 1, 9, "a count", 1, v, 4, why, sizeof why) == -1);
    CHECK(ds_parse_int_list("9223372036854775807k", 1, INT64_MAX, "a count", 1, v, 4, why, sizeof why) == -1);
}

TEST(parse_int_ranges) {
    ds_int_range r[3];
    char why[200];
    CHECK(ds_parse_int_ranges("128847-129270,129279", 0, 200000, r, 3, why, sizeof why) == 2 && r[0].lo == 128847 &&
          r[0].hi == 129270 && r[1].lo == 129279 && r[1].hi == 129279);
    CHECK(ds_parse_int_ranges("none", 0, 9, r, 3, why, sizeof why) == 0);
    CHECK(ds_parse_int_ranges("7-3", 0, 9, r, 3, why, sizeof why) == -1);
    CHECK(!strcmp(why, "'7-3' at offset 0: expected an id or a range a-b (a <= b) within [0, 9], comma-separated, or none"),
          "%s", why);
    CHECK(ds_parse_int_ranges("1,,2", 0, 9, r, 3, why, sizeof why) == -1 && strstr(why, "'' at offset 2"), "%s", why);
    CHECK(ds_parse_int_ranges("1-", 0, 9, r, 3, why, sizeof why) == -1);
    CHECK(ds_parse_int_ranges("-1", 0, 9, r, 3, why, sizeof why) == -1);
    CHECK(ds_parse_int_ranges("3-10", 0, 9, r, 3, why, sizeof why) == -1);
    CHECK(ds_parse_int_ranges("", 0, 9, r, 3, why, sizeof why) == -1);
    CHECK(ds_parse_int_ranges("1,2,3,4", 0, 9, r, 3, why, sizeof why) == -1 && strstr(why, "more than 3 ranges"), "%s", why);
}

TEST(parse_ids_forms_and_errors) {
    int32_t *ids = NULL;
    size_t n = 0, cap = 0;
    char why[160];
    CHECK(ds_parse_ids("1,2,3", 0, 100, NULL, &ids, &n, &cap, why, sizeof why) == 0 && n == 3 && ids[2] == 3);
    CHECK(ds_parse_ids("[4, 5]\n6", 0, 100, NULL, &ids, &n, &cap, why, sizeof why) == 0 && n == 6 && ids[3] == 4 && ids[5] == 6);
    CHECK(ds_parse_ids("7 x9 8", 0, 100, NULL, &ids, &n, &cap, why, sizeof why) == -1);
    CHECK(!strcmp(why, "'x9' at offset 2: expected an integer token id in [0, 100]"), "%s", why);
    CHECK(ds_parse_ids("101", 0, 100, NULL, &ids, &n, &cap, why, sizeof why) == -1);
    CHECK(ds_parse_ids("-1", -5, 5, NULL, &ids, &n, &cap, why, sizeof why) == 0 && ids[n - 1] == -1);
    CHECK(ds_parse_ids("3,0", 1, 9, "a prompt length", &ids, &n, &cap, why, sizeof why) == -1);
    CHECK(!strcmp(why, "'0' at offset 2: expected a prompt length in [1, 9]"), "%s", why);
    free(ids);
    int64_t v;
    CHECK(ds_parse_int_range("12", 0, 12, &v) == 0 && v == 12);
    CHECK(ds_parse_int_range(" 12", 0, 12, &v) == -1 && ds_parse_int_range("", 0, 12, &v) == -1);
    CHECK(ds_parse_int_range("99999999999999999999", 0, INT64_MAX, &v) == -1);
}

RUN_ALL()
