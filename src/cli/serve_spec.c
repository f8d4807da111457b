/* `dsflash serve` and speculative decoding (SERVING.md §8, §12, §13 steps 1, 2, 7): validating the
 * three flags, deciding whether the draft is loaded, the configuration-echo wording and the
 * start-up acceptance probe.
 *
 * Why a file of its own: the serve command's flag handling and start-up sequence are shared with
 * other work; speculation only needs a few decisions at fixed points of it, and keeping them here
 * keeps those points to one call each.
 *
 * Decisions (docs/DECISIONS.md 13): the probe runs only when the checkpoint declares a trained
 * draft (no `dspark_draft_random` key); a canned structured prompt (plain text, no chat template:
 * a sentence and a counting sequence) is prefilled and decoded greedily with S drafts for 24
 * verify steps on the model alone, and A must exceed 1.5, else start-up fails with the
 * draft-misconfiguration message. */
#include "cli/serve_spec.h"
#include "engine/spec.h"
#include "dist/dist.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROBE_STEPS 24
static const char k_probe_text[] =
    "The quick brown fox jumps over the lazy dog. 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, "
    "21, 22, 23, 24,";

int serve_spec_parse(serve_spec *sp, const char *S_text, bool S_given, const char *sched, const char *guard,
                     const char *policy, ds_error *err) {
    memset(sp, 0, sizeof *sp);
    char *end;
    long S = strtol(S_text, &end, 10);
    if (!*S_text || *end || S < 0 || S > 5)
        return ds_fail(err, "E_USAGE", "--num-speculative-tokens: expected 0..5 (one draft pass yields %d proposals), found \"%s\"", 5,
                       S_text);
    sp->S = (int)S;
    sp->S_given = S_given;
    sp->sched = sched;
    if (!strcmp(guard, "on")) sp->guard = DS_SPEC_GUARD_ON;
    else if (!strcmp(guard, "warn")) sp->guard = DS_SPEC_GUARD_WARN;
    else if (!strcmp(guard, "off")) sp->guard = DS_SPEC_GUARD_OFF;
    else return ds_fail(err, "E_USAGE", "--spec-guard: expected on, warn or off, found \"%s\"", guard);
    if (!strcmp(policy, "measured")) sp->measured = true;
    else if (strcmp(policy, "fixed")) return ds_fail(err, "E_USAGE", "--spec-policy: expected measured or fixed, found \"%s\"", policy);
    return 0;
}

int serve_spec_draft_option(const serve_spec *sp) { return sp->S == 0 ? 0 : sp->S_given ? 2 : 1; }

/* --spec-policy measured: time plain and speculative steps on the model (docs/DECISIONS.md 165).
 * Returns 1 when no acceptance can pay on this host (speculation stays off, said in the echo),
 * else 0 (ec->spec_min_accept holds the break-even, or stays 1.5 when nothing could be measured). */
static int measure_policy(serve_spec *sp, ds_model *m, ds_engine_config *ec) {
    enum { REPS = 5 };
    if (ds_dist_active()) {   /* a step on rank 0 alone would wait for the other ranks forever */
        ds_log(DS_LOG_INFO, "speculation: break-even not measured with several ranks; the guard keeps 1.5");
        return 0;
    }
    ds_error me = {0};
    if (ds_spec_measure_cost(m, sp->S, REPS, &sp->cost, &me) < 0) {
        /* not a start-up failure of its own: a model whose steps fail (non-finite weights, say) is
         * refused by the warm-up probe, with the message that names the command to find the tensor */
        ds_log(DS_LOG_WARN, "speculation: break-even not measured (%s); the guard keeps 1.5", me.msg);
        memset(&sp->cost, 0, sizeof sp->cost);
        return 0;
    }
    const double min_a = ds_spec_min_accept(&sp->cost, sp->S);
    ds_log(DS_LOG_INFO, "speculation: decode step %.1f ms, speculative step (draft + %d-row verify) %.1f ms: break-even A %.2f",
           1e3 * sp->cost.plain_s, sp->S + 1, 1e3 * sp->cost.spec_s, sp->cost.break_even);
    if (min_a == 0.0) {
        snprintf(sp->echo, sizeof sp->echo, "OFF (a speculative step costs %.2fx a decode step here: above the %d tokens it can emit)",
                 sp->cost.break_even, sp->S + 1);
        ds_log(DS_LOG_WARN, "speculative decoding off: a speculative step (K %d) costs %.2fx a decode step on this host, more than "
               "the %d tokens it can emit (--spec-policy fixed keeps it on)", sp->S, sp->cost.break_even, sp->S + 1);
        return 1;
    }
    ec->spec_min_accept = min_a;
    ec->spec_backoff = true;
    return 0;
}

int serve_spec_configure(serve_spec *sp, ds_model *m, ds_engine_config *ec, ds_error *err) {
    ec->spec_guard = sp->guard;
    if (sp->S == 0) {
        snprintf(sp->echo, sizeof sp->echo, "OFF (--num-speculative-tokens 0)");
        ec->spec_tokens = 0;
        return 0;
    }
    if (!m->draft) {
        snprintf(sp->echo, sizeof sp->echo, "OFF (%s)", m->ckpt && m->ckpt->draft_disabled_reason[0]
                                                            ? (strstr(m->ckpt->draft_disabled_reason, "vocabulary") ? "draft vocabulary missing"
                                                                                                                     : m->ckpt->draft_disabled_reason)
                                                            : "no draft in this checkpoint");
        ec->spec_tokens = 0;
        return 0;
    }
    if (ec->max_num_batched_tokens < ec->max_num_seqs * (1 + sp->S)) {
        /* §12: the budget must hold a verify row set of every request.  An explicit S is refused;
         * the default S leaves speculation off, said in the echo and in a WARN line */
        if (sp->S_given)
            return ds_fail(err, "E_USAGE", "--max-num-batched-tokens %d: expected >= --max-num-seqs x (1 + --num-speculative-tokens) "
                           "= %d", ec->max_num_batched_tokens, ec->max_num_seqs * (1 + sp->S));
        snprintf(sp->echo, sizeof sp->echo, "OFF (--max-num-batched-tokens %d < --max-num-seqs %d x (1 + %d))",
                 ec->max_num_batched_tokens, ec->max_num_seqs, sp->S);
        ds_log(DS_LOG_WARN, "speculative decoding off: --max-num-batched-tokens %d is below --max-num-seqs x (1 + S) = %d",
               ec->max_num_batched_tokens, ec->max_num_seqs * (1 + sp->S));
        ec->spec_tokens = 0;
        sp->S = 0;
        return 0;
    }
    if (sp->measured) {
        if (measure_policy(sp, m, ec)) {
            ec->spec_tokens = 0;
            sp->S = 0;
            return 0;
        }
    }
    ec->spec_tokens = sp->S;
    if (sp->sched && ds_spec_schedule_parse(ec, sp->sched, err) < 0) return -1;
    char policy[64] = ", policy fixed";
    if (sp->cost.reps) snprintf(policy, sizeof policy, ", break-even A %.2f measured", sp->cost.break_even);
    else if (sp->measured) snprintf(policy, sizeof policy, ", break-even not measured");
    snprintf(sp->echo, sizeof sp->echo, "ON (S %d, draft %s, guard %s%s%s%s)", sp->S, m->draft->trained ? "trained" : "declared random",
             sp->guard == DS_SPEC_GUARD_ON ? "on" : sp->guard == DS_SPEC_GUARD_WARN ? "warn" : "off",
             sp->sched ? ", schedule " : "", sp->sched ? sp->sched : "", policy);
    return 0;
}

int serve_spec_probe(const serve_spec *sp, ds_model *m, const ds_tokenizer *tok, ds_error *err) {
    if (sp->S == 0 || !m->draft) {
        fprintf(stderr, "[selfcheck] dspark: SKIP speculation %s\n", sp->echo);
        return 0;
    }
    if (!m->draft->trained) {
        fprintf(stderr, "[selfcheck] dspark: SKIP acceptance probe (the checkpoint declares a random draft: dspark_draft_random)\n");
        return 0;
    }
    ds_tokens t = {0};
    ds_tokens_push(&t, m->cfg.bos_id);
    if (ds_tokenizer_encode(tok, k_probe_text, sizeof k_probe_text - 1, false, &t, err) < 0) return -1;
    const int V = m->cfg.vocab_size;
    uint8_t *masked = ds_xcalloc((size_t)V, 1);
    masked[m->cfg.dspark_noise_id] = 1;
    float *lg = ds_amalloc(sizeof(float) * (size_t)V);
    ds_seq *s = ds_seq_new(m);
    int rc = s ? ds_spec_prefill(m, s, t.ids, (int)t.n, 0, lg, err) : ds_fail(err, "E_SEQ", "probe: cannot create a sequence");
    int steps = 0, tokens = 0;
    if (!rc) {
        int32_t anchor, out[8];
        ds_spec_accept_greedy(lg, V, masked, NULL, 0, &anchor);
        for (; steps < PROBE_STEPS && !rc; steps++) {
            int acc = ds_spec_greedy_step(m, s, anchor, sp->S, masked, out, NULL, err);
            if (acc < 0) rc = -1;
            else tokens += acc + 1, anchor = out[acc];
        }
    }
    ds_seq_free(s);
    ds_afree(lg);
    free(masked);
    ds_tokens_free(&t);
    if (rc) return -1;
    double A = (double)tokens / (double)steps;
    if (A <= 1.5) {
        fprintf(stderr, "[selfcheck] dspark: FAIL mean acceptance length %.2f <= 1.5 on the canned prompt\n", A);
        return ds_fail(err, "E_SELFCHECK", "draft acceptance %.2f on the canned prompt: suspect draft misconfiguration (vocabulary "
                       "rotation, missing attention)", A);
    }
    char note[160] = "";
    if (sp->cost.reps)
        snprintf(note, sizeof note, "; break-even %.2f measured: requests accepting less pause drafting", sp->cost.break_even);
    fprintf(stderr, "[selfcheck] dspark: OK mean acceptance length %.2f > 1.5 (canned prompt, %d verify steps, S %d%s)\n", A, steps,
            sp->S, note);
    return 0;
}
