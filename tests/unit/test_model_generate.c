/* `dsflash generate` end to end on the tiny checkpoint: option handling (exact long options, exit
 * codes of TOOLS.md §0), the printed ids and timings, and the trace file in the agreed format —
 * shapes, metadata, tokens = prompt ++ generated[:-1], and every generated token equal to the
 * argmax (ties → lowest id) of the traced logits of the row before it.  The trace must also equal
 * one written with another chunk size, bit for bit. */
#include "check.h"
#include "io/safetensors.h"
#include "base/bf16.h"
#include <limits.h>
#include <stdlib.h>


#define PROMPT "5,900,17,17,3,250,999,41,8,77,123,456,789,10,11,12,13,14,15,16,200,300,400,500,600"
#define P 25
#define G 12

TEST(usage_errors_exit_2) {
    char out[4096];
    CHECK(ds_test_sh(out, sizeof out, "%s generate 2>&1", ds_test_bin()) == 2);
    CHECK(ds_test_sh(out, sizeof out, "%s generate --model x --prompt-ids 1 --max 3 2>&1", ds_test_bin()) == 2, "abbreviation");
    CHECK(strstr(out, "usage:") != NULL, "usage printed: %s", out);
    CHECK(ds_test_sh(out, sizeof out, "%s generate --model x --prompt-ids 1,,2 --max-tokens 3 2>&1", ds_test_bin()) == 2);
    CHECK(ds_test_sh(out, sizeof out, "%s generate --model x --prompt-ids 1 --prompt-file f --max-tokens 3 2>&1",
                     ds_test_bin()) == 2, "exactly one prompt source");
    CHECK(ds_test_sh(out, sizeof out, "%s generate --model x --prompt-ids 1 --max-tokens 0 2>&1", ds_test_bin()) == 2);
    CHECK(ds_test_sh(out, sizeof out, "%s generate --model x --prompt-ids 1 --max-tokens 3 --chunk -1 2>&1", ds_test_bin()) == 2);
    CHECK(ds_test_sh(out, sizeof out, "%s generate --help", ds_test_bin()) == 0 && strstr(out, "--max-tokens"));
    CHECK(ds_test_sh(out, sizeof out, "%s generate --model x --prompt-ids 1 --max-tokens 3 --numerics fp32 2>&1", ds_test_bin()) == 2 &&
          strstr(out, "--numerics") && strstr(out, "fp32") && strstr(out, "exact or fast"), "%s", out);
    CHECK(ds_test_sh(out, sizeof out, "%s generate --help", ds_test_bin()) == 0 && strstr(out, "--numerics exact|fast"));
}

TEST(input_errors) {
    const char *d = ds_test_tiny_fixture();
    if (!d) { CHECK(0, "fixture"); return; }
    char out[4096];
    CHECK(ds_test_sh(out, sizeof out, "%s generate --model %s/nope --prompt-ids 1 --max-tokens 2 2>&1", ds_test_bin(), d) == 5,
          "missing model: %s", out);
    CHECK(strstr(out, "E_MISSING_FILE") != NULL, "%s", out);
    CHECK(ds_test_sh(out, sizeof out, "%s generate --model %s --prompt-ids 1,1024 --max-tokens 2 2>&1", ds_test_bin(), d) == 2,
          "id beyond the vocabulary: %s", out);
    CHECK(strstr(out, "1024") != NULL);
    CHECK(ds_test_sh(out, sizeof out, "%s generate --model %s --prompt-ids 1 --max-tokens 2 --trace %s/no/dir/t.st 2>&1",
                     ds_test_bin(), d, ds_test_tmpdir()) == 3, "unwritable trace: %s", out);
    CHECK(ds_test_sh(out, sizeof out, "%s generate --model %s --prompt-file %s/absent.txt --max-tokens 2 2>&1", ds_test_bin(), d,
                     ds_test_tmpdir()) == 5, "missing prompt file: %s", out);
}

static int parse_generated(const char *out, int32_t *ids, int max) {
    const char *g = strstr(out, "generated: ");
    if (!g) return -1;
    g += 11;
    int n = 0;
    while (n < max && *g >= '0' && *g <= '9') {
        ids[n++] = (int32_t)strtol(g, (char **)&g, 10);
        if (*g == ',') g++;
    }
    return n;
}

TEST(trace_file_matches_the_run) {
    const char *d = ds_test_tiny_fixture();
    if (!d) { CHECK(0, "fixture"); return; }
    char out[8192], path7[1300], path1[1300];
    snprintf(path7, sizeof path7, "%s/trace7.st", ds_test_tmpdir());
    snprintf(path1, sizeof path1, "%s/trace25.st", ds_test_tmpdir());
    int rc = ds_test_sh(out, sizeof out, "%s generate --model %s --prompt-ids " PROMPT " --max-tokens %d --chunk 7 --trace %s "
                        "--kernels reference 2>/dev/null", ds_test_bin(), d, G, path7);
    CHECK(rc == 0, "rc %d: %s", rc, out);
    CHECK(strstr(out, "prefill: 25 tokens") && strstr(out, "decode: 11 tokens") && strstr(out, "tok/s"), "%s", out);
    int32_t gen[G];
    CHECK(parse_generated(out, gen, G) == G, "%s", out);
    ds_stfile *f = NULL;
    ds_error err;
    CHECK(ds_st_open(path7, &f, &err) == 0, "%s", err.msg);
    if (!f) return;
    const int T = P + G - 1;
    const ds_tensor *tk = ds_st_find(f, "tokens"), *gn = ds_st_find(f, "generated"), *lg = ds_st_find(f, "logits");
    CHECK(tk && tk->dtype == DS_DT_I32 && tk->ndim == 1 && tk->shape[0] == T);
    CHECK(gn && gn->dtype == DS_DT_I32 && gn->ndim == 1 && gn->shape[0] == G);
    CHECK(lg && lg->dtype == DS_DT_F32 && lg->ndim == 2 && lg->shape[0] == T && lg->shape[1] == 1024);
    for (int l = 0; l < 8; l++) {
        char n[32];
        snprintf(n, sizeof n, "hidden.%d", l);
        const ds_tensor *h = ds_st_find(f, n);
        CHECK(h && h->dtype == DS_DT_BF16 && h->ndim == 3 && h->shape[0] == T && h->shape[1] == 4 && h->shape[2] == 128, "%s", n);
    }
    CHECK(!ds_st_find(f, "hidden.8"));
    CHECK(f->metadata_json && strstr(f->metadata_json, "\"chunk\"") && strstr(f->metadata_json, "\"7\"") &&
          strstr(f->metadata_json, "\"prompt_len\"") && strstr(f->metadata_json, "\"25\""), "%s", f->metadata_json);
    if (tk && gn && lg) {
        const int32_t *tt = tk->data, *gg = gn->data;
        const float *L = lg->data;
        int32_t pr[P] = {5, 900, 17, 17, 3, 250, 999, 41, 8, 77, 123, 456, 789, 10, 11, 12, 13, 14, 15, 16, 200, 300, 400, 500, 600};
        for (int i = 0; i < P; i++) CHECK(tt[i] == pr[i], "prompt token %d", i);
        for (int i = 0; i < G; i++) {
            CHECK(gg[i] == gen[i], "generated %d: file %d printed %d", i, gg[i], gen[i]);
            if (i < G - 1) CHECK(tt[P + i] == gg[i], "fed-back token %d", i);
            const float *row = L + (size_t)(P - 1 + i) * 1024;
            int best = 0;
            for (int v = 1; v < 1024; v++) if (row[v] > row[best]) best = v;
            CHECK(best == gg[i], "token %d is the argmax of row %d", i, P - 1 + i);
        }
    }
    /* the same run in one chunk: identical tensors */
    rc = ds_test_sh(out, sizeof out, "%s generate --model %s --prompt-ids " PROMPT " --max-tokens %d --trace %s "
                    "--kernels reference 2>/dev/null", ds_test_bin(), d, G, path1);
    CHECK(rc == 0);
    ds_stfile *f1 = NULL;
    CHECK(ds_st_open(path1, &f1, &err) == 0, "%s", err.msg);
    if (f1) {
        for (int i = 0; i < f->n_tensors; i++) {
            const ds_tensor *a = &f->tensors[i], *b = ds_st_find(f1, a->name);
            CHECK(b && b->nbytes == a->nbytes && !memcmp(a->data, b->data, a->nbytes), "%s differs between chunk 7 and 25",
                  a->name);
        }
        CHECK(strstr(f1->metadata_json, "\"25\""));
        ds_st_close(f1);
    }
    ds_st_close(f);
}

TEST(prompt_file_through_the_tokenizer) {
    const char *d = ds_test_tiny_fixture();
    if (!d) { CHECK(0, "fixture"); return; }
    char out[8192], pf[1300];
    snprintf(pf, sizeof pf, "%s/prompt.txt", ds_test_tmpdir());
    FILE *fp = fopen(pf, "w");
    fputs("The quick brown fox jumps over the lazy dog.", fp);
    fclose(fp);
    int rc = ds_test_sh(out, sizeof out, "%s generate --model %s --prompt-file %s --max-tokens 3 2>&1", ds_test_bin(), d, pf);
    CHECK(rc == 0, "rc %d: %s", rc, out);
    CHECK(strstr(out, "prompt: ") && strstr(out, "text: "), "%s", out);
    int32_t g[3];
    CHECK(parse_generated(out, g, 3) == 3);
}

RUN_ALL()
