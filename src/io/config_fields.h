/* The table of plain config fields (MODEL.md §1.1), shared by the parser, the two-file agreement
 * check and the JSON writers.  One row per field keeps the HF name, the flat name, the type, where
 * it lives in ds_config and when it is required, so the three users can never disagree about a
 * spelling.  Fields with structure of their own (score function, quantization_config, rotation
 * config, vision, Engram multipliers and token-map file, the must-be-constant keys) are handled by
 * hand in config.c. */
#ifndef DS_IO_CONFIG_FIELDS_H
#define DS_IO_CONFIG_FIELDS_H
#include "io/config.h"
#include <stddef.h>

typedef enum { CF_INT, CF_I64, CF_DBL, CF_BOOL, CF_INTS, CF_I64S } cf_type;
/* When a field is required; otherwise its default applies. */
typedef enum { CF_ALWAYS, CF_OPT, CF_ENGRAM, CF_INDEX, CF_CAND, CF_DRAFT } cf_req;

typedef struct cf_field {
    const char *hf;        /* HF name (looked up in text_config, then top level); "a.b" = nested */
    const char *hf_alt;    /* second accepted HF spelling, or NULL */
    const char *flat;      /* flat name, or NULL when the flat spelling has none */
    cf_type type;
    size_t off;            /* offset of the value (or array) in ds_config */
    size_t cnt_off;        /* offset of the int count for lists */
    int max_n;             /* list capacity */
    cf_req req;
    double def;            /* default for scalars when not required (lists default to empty) */
    double lo, hi;         /* accepted range of scalars / list items */
} cf_field;

extern const cf_field ds_cf_fields[];
extern const int ds_cf_n_fields;

#endif
