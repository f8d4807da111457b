/* Speculative rows of `dsflash perf decode` (cmd_bench_spec.c). */
#ifndef DS_CLI_CMD_BENCH_SPEC_H
#define DS_CLI_CMD_BENCH_SPEC_H
#include "model/model.h"

/* Greedy decoding of n_tokens after `prompt` with K drafts per verify step and without, plus the
 * verify-step and draft-pass costs (best of reps) and their linears' floors (cli/bench_floor.h) at
 * read_bw GB/s and int8_peak GOP/s (the float peaks are measured here); prints table rows.  0, 1
 * (identity or step failure), 2 (usage). */
int ds_bench_spec_decode(ds_model *m, const int32_t *prompt, int P, int n_tokens, int K, int reps, double read_bw,
                         double int8_peak);

#endif
