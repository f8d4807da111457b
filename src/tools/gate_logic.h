/* Decision rules of the accuracy gates (TOOLS.md §6): GSM8K answer extraction, the agent-gate
 * outcome and failure signatures, and the two-sided Fisher exact test.
 *
 * Why separate from the commands: a gate's verdict is only as good as these rules, and each rule
 * has an edge that once produced a wrong verdict somewhere (an answer without `####`, a tool call
 * whose arguments are a string, CJK output that has no spaces for a word ratio).  As pure
 * functions over the response fields they are unit-tested case by case, and the commands only
 * move JSON around them. */
#ifndef DS_TOOLS_GATE_LOGIC_H
#define DS_TOOLS_GATE_LOGIC_H
#include "base/common.h"

/* §6.1: the number after the last "####": first match of -?[0-9][0-9,]*(\.[0-9]+)?, commas and
 * '$' stripped.  Returns 1 and *out, or 0 when there is no "####" or no number after it. */
int ds_gsm8k_extract(const char *text, double *out);
/* exact for integers, |diff| < 1e-6 otherwise */
bool ds_gsm8k_equal(double pred, double gold);
/* Verdict of §6.1 for `correct` of `total`: thresholds 195/200 and 190/200 scaled to total. */
typedef enum { DS_GATE_PASS = 0, DS_GATE_INVESTIGATE, DS_GATE_FAIL } ds_gate_verdict;
ds_gate_verdict ds_gsm8k_verdict(int64_t correct, int64_t total);
const char *ds_gate_verdict_name(ds_gate_verdict v);

/* §6.2 outcome of one assistant turn. */
typedef enum {
    DS_AG_PASS = 0,
    DS_AG_TRUNCATED,
    DS_AG_EMPTY_OUTPUT,
    DS_AG_MALFORMED_TOOL_CALL,
    DS_AG_WRONG_TOOL,
    DS_AG_MIXED_SCRIPT,
    DS_AG_REPETITIVE,
    DS_AG_NO_TOOL_CALL,
    DS_AG_N
} ds_ag_outcome;
const char *ds_ag_outcome_name(ds_ag_outcome o);

typedef struct ds_ag_call { const char *name, *arguments; } ds_ag_call;
typedef struct ds_ag_turn {
    const char *content, *reasoning, *finish_reason;   /* NULL = absent */
    const ds_ag_call *calls;
    int n_calls;
} ds_ag_turn;
/* PASS (a valid read call), TRUNCATED (finish_reason "length"), else the first signature in the
 * order of §6.2.  *design_md is set when the valid read call's path is "DESIGN.md". */
ds_ag_outcome ds_ag_classify(const ds_ag_turn *t, bool *design_md);
/* The two text rules, exposed for tests. */
bool ds_ag_mixed_script(const char *text);
bool ds_ag_repetitive(const char *text);

/* Two-sided Fisher exact p-value of [[a,b],[c,d]]: the probability of every table with the same
 * margins no more likely than the observed one (relative tolerance 1e-7). */
double ds_fisher_two_sided(int64_t a, int64_t b, int64_t c, int64_t d);
/* Known tables; returns 0, or -1 with the failing case in msg. */
int ds_fisher_selftest(char *msg, size_t len);

#endif
