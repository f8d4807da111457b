/* The probes' and gates' pure rules (TOOLS.md §5.1, §6.1, §6.2, §6.5) against values written out
 * from the spec by hand: the filler's literal records, the Wilson examples the spec prints, GSM8K
 * extraction cases, one scripted turn per agent-gate signature, and Fisher p-values computed
 * independently with exact binomials (Python's math.comb; see the comments). */
#include "check.h"
#include "tools/gate_logic.h"
#include "tools/probe_text.h"
#include <math.h>

TEST(filler_literal_records) {
    ds_filler f;
    ds_filler_build(&f, "a1b2c3", 200);
    const char *want = "会话a1b2c3开始。记录编号00000000的内容是：00000000-0000000000-000000000000。"
                       "记录编号00000001的内容是：00007919-0000104729-000015485863。";
    CHECK(!strncmp(f.text, want, strlen(want)), "start: %.200s", f.text);
    /* header 11 code points, each record 50: stop at the first length >= 200 */
    CHECK(f.chars == 211 && f.n_rec == 4, "chars %lld records %lld", (long long)f.chars, (long long)f.n_rec);
    CHECK(ds_utf8_count(f.text, f.bytes) == f.chars);
    CHECK(f.bound_char[0] == 11 && f.bound_char[3] == 161);
    ds_filler_free(&f);
    CHECK(ds_filler_nchar(10000) == 22552 + 200, "%lld", (long long)ds_filler_nchar(10000));
}

TEST(filler_needle_depth) {
    ds_filler f;
    ds_filler_build(&f, "000000", 5000);
    double frac = 0.5, depth = 0;
    const char *needle = "\n【重要标记】本项目的内部代号是 ZQ-7749。\n";
    char *doc = ds_filler_insert(&f, 1, &frac, &needle, &depth);
    CHECK(fabs(depth - 0.5) <= 0.005, "depth %f", depth);
    const char *at = strstr(doc, needle);
    CHECK(at && !strncmp(at + strlen(needle), "记录编号", strlen("记录编号")), "needle not at a record start");
    CHECK(strlen(doc) == f.bytes + strlen(needle));
    free(doc);
    double fr4[4] = {0.2, 0.4, 0.6, 0.8}, d4[4];
    const char *t4[4] = {"<1>", "<2>", "<3>", "<4>"};
    doc = ds_filler_insert(&f, 4, fr4, t4, d4);
    for (int k = 0; k < 4; k++) CHECK(fabs(d4[k] - fr4[k]) <= 0.005, "needle %d depth %f", k, d4[k]);
    CHECK(strstr(doc, "<1>") < strstr(doc, "<2>") && strstr(doc, "<3>") < strstr(doc, "<4>"));
    free(doc);
    ds_filler_free(&f);
}

TEST(nonce_and_uniq2) {
    ds_probe_rng r, r2;
    ds_probe_rng_seed(&r, 7);
    ds_probe_rng_seed(&r2, 7);
    char a[7], b[7], c[7];
    ds_probe_nonce(&r, a);
    ds_probe_nonce(&r2, b);
    ds_probe_nonce(&r, c);
    CHECK(strlen(a) == 6 && !strcmp(a, b) && strcmp(a, c), "%s %s %s", a, b, c);
    int32_t ids[6] = {1, 2, 1, 2, 1, 2};   /* bigrams 12 21 12 21 12: 2 distinct of 5 */
    CHECK(fabs(ds_uniq2_ids(ids, 6) - 0.4) < 1e-12);
    CHECK(ds_uniq2_ids(ids, 1) == 1.0);
}

TEST(wilson_spec_examples) {
    double lo, hi;
    ds_wilson95(10, 10, &lo, &hi);
    CHECK(fabs(lo - 0.722) < 5e-4 && fabs(hi - 1) < 1e-9, "%f %f", lo, hi);
    ds_wilson95(6, 6, &lo, &hi);
    CHECK(fabs(lo - 0.610) < 5e-4 && fabs(hi - 1) < 1e-9, "%f %f", lo, hi);
    ds_wilson95(9, 10, &lo, &hi);
    CHECK(fabs(lo - 0.596) < 5e-4 && fabs(hi - 0.982) < 5e-4, "%f %f", lo, hi);
    ds_wilson95(0, 0, &lo, &hi);
    CHECK(lo == 0 && hi == 1);
}

TEST(gsm8k_extraction) {
    double v = 0;
    CHECK(ds_gsm8k_extract("so #### 12 then\n#### $1,234.50 dollars", &v) && v == 1234.5, "%f", v);
    CHECK(ds_gsm8k_extract("#### -7", &v) && v == -7);
    CHECK(ds_gsm8k_extract("#### the answer is 42.", &v) && v == 42);
    CHECK(!ds_gsm8k_extract("the answer is 42", &v));
    CHECK(!ds_gsm8k_extract("#### none", &v));
    CHECK(!ds_gsm8k_extract(NULL, &v));
    CHECK(ds_gsm8k_equal(18, 18) && !ds_gsm8k_equal(18, 19) && ds_gsm8k_equal(0.1 + 0.2, 0.3));
    CHECK(ds_gsm8k_verdict(195, 200) == DS_GATE_PASS && ds_gsm8k_verdict(194, 200) == DS_GATE_INVESTIGATE);
    CHECK(ds_gsm8k_verdict(190, 200) == DS_GATE_INVESTIGATE && ds_gsm8k_verdict(189, 200) == DS_GATE_FAIL);
    CHECK(ds_gsm8k_verdict(8, 8) == DS_GATE_PASS && ds_gsm8k_verdict(7, 8) == DS_GATE_FAIL);
}

static ds_ag_outcome classify(const char *content, const char *reasoning, const char *finish, const char *name,
                              const char *args, bool *design) {
    ds_ag_call call = {name, args};
    ds_ag_turn t = {content, reasoning, finish, name ? &call : NULL, name ? 1 : 0};
    return ds_ag_classify(&t, design);
}

TEST(agent_gate_signatures) {
    bool d = false;
    CHECK(classify(NULL, "think", "tool_calls", "read", "{\"path\":\"DESIGN.md\"}", &d) == DS_AG_PASS && d);
    CHECK(classify("", NULL, "tool_calls", "read", "{\"path\":\"other.md\"}", &d) == DS_AG_PASS && !d);
    CHECK(classify("long", NULL, "length", NULL, NULL, &d) == DS_AG_TRUNCATED);
    CHECK(classify("", "", "stop", NULL, NULL, &d) == DS_AG_EMPTY_OUTPUT);
    CHECK(classify("<｜DSML｜ invoke name=\"read\">", NULL, "stop", NULL, NULL, &d) == DS_AG_MALFORMED_TOOL_CALL);
    CHECK(classify("", NULL, "tool_calls", "read", "\"DESIGN.md\"", &d) == DS_AG_MALFORMED_TOOL_CALL);
    CHECK(classify("", NULL, "tool_calls", "read", "{\"file\":\"DESIGN.md\"}", &d) == DS_AG_MALFORMED_TOOL_CALL);
    CHECK(classify("", NULL, "tool_calls", "bash", "{\"command\":\"cat DESIGN.md\"}", &d) == DS_AG_WRONG_TOOL);
    CHECK(classify("Сейчас прочитаю файл", NULL, "stop", NULL, NULL, &d) == DS_AG_MIXED_SCRIPT);
    CHECK(classify("ok مرحبا", NULL, "stop", NULL, NULL, &d) == DS_AG_MIXED_SCRIPT);
    CHECK(classify("the the the the the the the the the the the the the the the the the the the the next", NULL,
                   "stop", NULL, NULL, &d) == DS_AG_REPETITIVE);
    CHECK(classify("读取读取读取读取读取读取读取读取读取读取读取读取读取读取", NULL, "stop", NULL, NULL, &d) == DS_AG_REPETITIVE);
    CHECK(classify("I will now summarise both documents for you.", NULL, "stop", NULL, NULL, &d) == DS_AG_NO_TOOL_CALL);
    CHECK(!ds_ag_mixed_script("Пр ok") && ds_ag_mixed_script("При"));
    CHECK(!ds_ag_repetitive("本项目的内部代号是什么只回答代号本身请不要解释任何其他的内容谢谢你的帮助"));
}

TEST(fisher_exact) {
    char msg[256];
    CHECK(ds_fisher_selftest(msg, sizeof msg) == 0, "%s", msg);
    /* Python: sum of comb(r1,x)*comb(r2,c1-x)/comb(n,c1) over tables no more likely than observed */
    CHECK(fabs(ds_fisher_two_sided(8, 2, 1, 5) - 0.034965034965) < 1e-9, "%.12f", ds_fisher_two_sided(8, 2, 1, 5));
    CHECK(fabs(ds_fisher_two_sided(0, 10, 0, 10) - 1.0) < 1e-12);
    CHECK(fabs(ds_fisher_two_sided(53, 47, 10, 90) - 4.0660195065e-11) / 4.0660195065e-11 < 1e-6, "%g",
          ds_fisher_two_sided(53, 47, 10, 90));
}

RUN_ALL()
