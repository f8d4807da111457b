/* One command-line parser for every `dsflash` subcommand: a flag is one row of a table.
 *
 * Why a table: the commands used to hand-roll their loops with three integer parsers and two id
 * parsers, each with its own rules and messages, and flags slipped through that were accepted and
 * then ignored.  A row states the flag's exact long name, its type, its range or choices, its
 * default and its help; the parser applies the same rules everywhere (exact names only, since an
 * abbreviation once selected the wrong flag; every value validated, defaults included) and writes
 * one kind of message: `dsflash serve: --max-num-seqs: expected an integer in [1, 4096], got 'x'`.
 * A flag the build cannot honour yet is still a row, with `refuse` set: any value other than its
 * default is an error that says why.  Adding a flag is adding a row; reading it is
 * ds_flag_int/_str/... by name after ds_flags_parse.  Both `--name value` and `--name=value`.
 * A row with `list` may be given several times (`--target A --target B`); each value is validated
 * like any other and appended, and `text` holds the last one. */
#ifndef DS_BASE_FLAGS_H
#define DS_BASE_FLAGS_H
#include "base/common.h"
#include <stdio.h>

typedef enum {
    DS_FLAG_INT,     /* integer in [lo, hi] */
    DS_FLAG_SIZE,    /* bytes, optional K/M/G/T (powers of 1024, also KiB..) or KB/MB/GB/TB suffix, in [lo, hi] */
    DS_FLAG_DOUBLE,  /* number in [dlo, dhi], or (dlo, dhi] with lo_open */
    DS_FLAG_STRING,  /* any non-empty text */
    DS_FLAG_ENUM,    /* one of `choices` ("a|b|c") */
    DS_FLAG_SWITCH,  /* no value; on when given */
} ds_flag_type;

typedef struct ds_flag {
    /* ---- the row ---- */
    const char *name;        /* exact long option, "--max-num-seqs" */
    ds_flag_type type;
    const char *def;         /* default as text (validated like a value); NULL = unset */
    int64_t lo, hi;          /* INT / SIZE range (both 0: any non-negative INT, any SIZE >= 1) */
    double dlo, dhi;         /* DOUBLE range */
    bool lo_open;            /* DOUBLE: dlo itself excluded */
    const char *choices;     /* ENUM: "exact|fast" */
    const char *help;
    const char *refuse;      /* non-NULL: values other than `def` are refused with this reason */
    const char *alias_of;    /* this row is another name of flag `alias_of` (its value goes there) */
    const char **list;       /* non-NULL: the flag may repeat; each value is appended here (caller's storage) */
    int list_cap;            /* room in `list`; one more occurrence is a usage error naming the limit */
    /* ---- filled by ds_flags_parse ---- */
    const char *text;        /* effective value text (given, else def); NULL when unset */
    bool given;
    int64_t i;               /* INT, SIZE (as bytes), ENUM (choice index), SWITCH (0/1) */
    double d;                /* DOUBLE */
    int n_list;              /* values appended to `list` */
} ds_flag;

typedef struct ds_flagset {
    const char *cmd;         /* "dsflash serve" — prefixes every message */
    const char *usage;       /* first usage line(s), printed before the flag list */
    ds_flag *flags;
    size_t n;
    int max_positional;      /* positional arguments allowed */
    const char *positional_name;   /* for messages, e.g. "MODEL_DIR" */
    const char *positional[8];
    int n_positional;
} ds_flagset;

/* Parse argv[first..argc).  Returns 0 ok, 1 when --help was given (usage printed to stdout), 2 on
 * a usage error (message and usage printed to `err`). */
int ds_flags_parse(ds_flagset *fs, int argc, char **argv, int first, FILE *err);
void ds_flags_usage(const ds_flagset *fs, FILE *out);
/* Print "CMD: FLAG: WHY" and return 2 (for rules that involve several flags). */
int ds_flags_fail(const ds_flagset *fs, const char *flag, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Lookups by exact name (the name must be a row: a typo aborts, it is a programming error). */
ds_flag *ds_flag_get(ds_flagset *fs, const char *name);
int64_t ds_flag_int(ds_flagset *fs, const char *name);
double ds_flag_double(ds_flagset *fs, const char *name);
const char *ds_flag_str(ds_flagset *fs, const char *name);   /* NULL when unset */
bool ds_flag_on(ds_flagset *fs, const char *name);           /* SWITCH given */
bool ds_flag_given(ds_flagset *fs, const char *name);

/* Value parsers shared with the commands' own inputs (same rules as the table). */
int ds_parse_int_range(const char *s, int64_t lo, int64_t hi, int64_t *out);
/* Bytes with an optional suffix; 0 ok, -1 with `why` ("expected …"). */
int ds_parse_bytes(const char *s, uint64_t *out, char *why, size_t n);
/* Token ids separated by spaces, commas or newlines, optionally in a JSON array ("1,2,3", "[1, 2]"),
 * each in [lo, hi].  Appends to *ids (realloc'd, count in *n).  -1 with `why` naming the bad item,
 * its offset and `what` an item is (NULL: "an integer token id"). */
int ds_parse_ids(const char *s, int64_t lo, int64_t hi, const char *what, int32_t **ids, size_t *n, size_t *cap,
                 char *why, size_t why_len);
/* The same items into out[0..max) as 64-bit values; kilo: an item may end in k/K (x 1000, "8k").
 * Returns the count (>= 1), or -1 with `why` (a bad item, more than max, or none at all). */
int ds_parse_int_list(const char *s, int64_t lo, int64_t hi, const char *what, int kilo, int64_t *out, int max,
                      char *why, size_t why_len);

/* An inclusive range of integers, as "a-b" or "a" in a list. */
typedef struct ds_int_range { int64_t lo, hi; } ds_int_range;
/* Comma-separated ranges "a-b" or single values "a", each within [lo, hi] with a <= b, into
 * out[0..max); "none" is the empty list.  Returns the count (>= 0), or -1 with `why`. */
int ds_parse_int_ranges(const char *s, int64_t lo, int64_t hi, ds_int_range *out, int max, char *why, size_t why_len);

#endif
