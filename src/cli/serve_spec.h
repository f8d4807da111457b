/* Speculative-decoding decisions of `dsflash serve` (serve_spec.c). */
#ifndef DS_CLI_SERVE_SPEC_H
#define DS_CLI_SERVE_SPEC_H
#include "engine/engine.h"
#include "engine/spec.h"
#include "model/draft.h"
#include "tokenizer/tokenizer.h"

typedef struct serve_spec {
    int S;                  /* --num-speculative-tokens */
    bool S_given;           /* given explicitly: an unusable draft fails start-up */
    const char *sched;      /* --spec-tokens-per-batch-size or NULL */
    int guard;              /* DS_SPEC_GUARD_* */
    bool measured;          /* --spec-policy measured: the guard's threshold is the break-even measured at start-up */
    ds_spec_cost cost;      /* that measurement (reps 0: none) */
    char echo[256];         /* configuration echo: "ON (…)" or "OFF (reason)" */
} serve_spec;

/* Validate the four flags (values as given or defaulted). */
int serve_spec_parse(serve_spec *sp, const char *S_text, bool S_given, const char *sched, const char *guard,
                     const char *policy, ds_error *err);
/* ds_load_options.draft for these flags: 0 (S = 0), 1 (defaulted S: an unusable draft turns
 * speculation off with an ERROR line) or 2 (explicit S: an unusable draft fails the load). */
int serve_spec_draft_option(const serve_spec *sp);
/* Engine settings from the flags and the loaded model (with --spec-policy measured, the cost of
 * speculation is measured on the model first); fills sp->echo. */
int serve_spec_configure(serve_spec *sp, ds_model *m, ds_engine_config *ec, ds_error *err);
/* §13 step 7: the acceptance probe (prints its [selfcheck] line); -1 = start-up must fail. */
int serve_spec_probe(const serve_spec *sp, ds_model *m, const ds_tokenizer *tok, ds_error *err);

#endif
