/* The verifier's JSON result (`--json-out`, schema dsflash-verify/1): every check with its status
 * and detail, tensor counts by label and dtype, and the summary.  Kept apart from verify.c, which
 * runs the checks, because the file format is a separate concern that scripts depend on. */
#include "tools/verify_internal.h"
#include "base/fsutil.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void count_all(const vckpt *k, cJSON *counts) {
    int64_t by_label[DS_LABEL_ENGRAM + 1] = {0}, by_dtype[DS_DT_COUNT] = {0}, bytes = 0;
    for (int i = 0; i < k->n_names; i++) {
        by_label[v_name_label(k, &k->names[i])]++;
        by_dtype[k->names[i].t->dtype]++;
        bytes += (int64_t)k->names[i].t->nbytes;
    }
    cJSON_AddNumberToObject(counts, "tensors", k->n_names);
    cJSON *bl = cJSON_AddObjectToObject(counts, "by_label");
    for (int l = 0; l <= DS_LABEL_ENGRAM; l++)
        if (by_label[l]) cJSON_AddNumberToObject(bl, ds_label_name((ds_label)l), (double)by_label[l]);
    cJSON *bd = cJSON_AddObjectToObject(counts, "by_dtype");
    for (int d = 0; d < DS_DT_COUNT; d++)
        if (by_dtype[d]) cJSON_AddNumberToObject(bd, ds_dtype_name((ds_dtype)d), (double)by_dtype[d]);
    cJSON_AddNumberToObject(counts, "bytes", (double)bytes);
}

int v_write_json(vctx *v, const char *verdict, int n_checks, int n_failed, int n_warn, const char *started) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "schema", "dsflash-verify/1");
    cJSON_AddStringToObject(j, "tool_version", "dsflash verify 1");
    cJSON_AddStringToObject(j, "started_utc", started);
    cJSON_AddStringToObject(j, "command", v->o->cmdline ? v->o->cmdline : "");
    cJSON_AddStringToObject(j, "dir", v->o->dir);
    cJSON_AddStringToObject(j, "profile", v->profile ? "v41-flash-w4a8" : "none");
    cJSON *arr = cJSON_AddArrayToObject(j, "checks");
    for (int i = 0; i < v->n_checks; i++) {
        cJSON *c = cJSON_CreateObject();
        cJSON_AddStringToObject(c, "id", v->checks[i].id);
        cJSON_AddStringToObject(c, "status", v_status_name(v->checks[i].st));
        cJSON_AddStringToObject(c, "detail", v->checks[i].detail);
        cJSON_AddItemToArray(arr, c);
    }
    count_all(&v->m, cJSON_AddObjectToObject(j, "counts"));
    cJSON *s = cJSON_AddObjectToObject(j, "summary");
    cJSON_AddStringToObject(s, "status", verdict);
    cJSON_AddNumberToObject(s, "checks", n_checks);
    cJSON_AddNumberToObject(s, "failed", n_failed);
    cJSON_AddNumberToObject(s, "warnings", n_warn);
    char *text = cJSON_Print(j);
    cJSON_Delete(j);
    ds_error err;
    int rc = ds_write_file_atomic(v->o->json_out, text, strlen(text), &err);
    if (rc) printf("verify: cannot write %s: %s\n", v->o->json_out, err.msg);
    free(text);
    return rc;
}
