/* `dsflash verify DIR`: the structural checkpoint verifier (TOOLS.md §2).
 *
 * Two layers of expectation.  Every check is first derived from the checkpoint's own config.json
 * through the shared tensor plan (src/io/tensor_plan.h), so any legal configuration — tiny and mini
 * fixtures included — verifies; on top, the release profile `v41-flash-w4a8` adds the published
 * figures (tensor counts, Engram file sizes, vision size, representative shapes), applied when the
 * config has V4.1-Flash's dimensions (`--profile auto`) or when forced.
 *
 * The verifier reads the directory itself (index, description, every safetensors header) and
 * reports every check — it does not stop at the first problem the way a loader must — and it also
 * runs the loader's own checklist (CHECKPOINT.md §15, level full) so its E_/W_ codes appear in the
 * same report.  Shard sha256 values are never compared (independent quantizations differ in the
 * last bit); `--compare` compares contents with tolerances instead.
 *
 * Result: a table of check, status and detail, then `verify: PASS (checks N, warnings W)` or
 * `verify: FAIL (…)`; exit 0 pass (warnings allowed), 1 fail, 10 when an Engram table still needs
 * reassembly, 2 usage, 5 when DIR does not exist. */
#ifndef DS_TOOLS_VERIFY_H
#define DS_TOOLS_VERIFY_H
#include "base/common.h"

typedef enum { DS_PROFILE_AUTO = 0, DS_PROFILE_V41, DS_PROFILE_NONE } ds_verify_profile;

typedef struct ds_verify_opts {
    const char *dir;
    bool deep;                   /* D1: sampled value checks */
    int samples;                 /* rows / tensors sampled per kind (default 64) */
    const char *compare_dir;     /* X1 */
    ds_verify_profile profile;
    const char *json_out;        /* NULL: no JSON file */
    const char *cmdline;         /* recorded in the JSON result */
} ds_verify_opts;

void ds_verify_opts_default(ds_verify_opts *o);
/* Prints the report to stdout and returns the exit status. */
int ds_verify_run(const ds_verify_opts *o);

#endif
