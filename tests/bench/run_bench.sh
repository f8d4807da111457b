#!/usr/bin/env bash
# Smoke test of `dsflash perf serve` on the tiny fixture with --quick, in both numerics tiers.
#
# Why: the serving table is what issue reports quote, so CI checks that every row is printed,
# that every percentage lies in (0, 100] (a ratio above 100% means a limit probe under-reports
# the host and must be fixed, not shipped), that the --json record agrees with the table and
# with the ratios recomputed here from its raw figures (seconds, bytes, rows, GB/s), and that bad
# flags are refused with exit 2 and a message naming the flag.  Needs DSFLASH_BIN (tests/run.sh
# sets it) and node.
set -u
B=${DSFLASH_BIN:-$(cd "$(dirname "$0")/../.." && pwd)/build/${BUILD:-release}/dsflash}
TMP=${DS_TEST_TMP:-$(mktemp -d)}/bench.$$
mkdir -p "$TMP"
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "  ok   $1"; }
bad() { fail=$((fail + 1)); echo "  FAIL $1"; [ -n "${2:-}" ] && [ -f "$2" ] && sed 's/^/       /' "$2" | tail -20; }
check() { local name=$1; shift; if "$@" >/dev/null 2>&1; then ok "$name"; else bad "$name"; fi; }

finish() {
    rm -rf "$TMP"
    echo "$pass passed, $fail failed"
    [ "$fail" = 0 ]
    exit $?
}

if [ ! -x "$B" ] || ! command -v node >/dev/null; then
    bad "needs an executable dsflash ($B) and node"
    finish
fi
if ! "$B" mkmodel --config tiny --out "$TMP/tiny" --quiet > "$TMP/mk.log" 2>&1; then
    bad "mkmodel --config tiny" "$TMP/mk.log"
    finish
fi

OUT=$TMP/table.txt JSON=$TMP/serve.json
"$B" perf serve --model "$TMP/tiny" --threads 2 --numerics both --quick --json "$JSON" > "$OUT" 2> "$TMP/err.log"
rc=$?
if [ $rc = 0 ]; then ok "perf serve --quick --numerics both exits 0"; else bad "perf serve exits 0 (rc $rc)" "$TMP/err.log"; fi

# ---- the table's rows ----
check "limits line names read bandwidth (with its spread) and int8 peak" grep -qE '^limits .*read-only [0-9.]+ GB/s \(spread of its [0-9]+ passes: median [0-9.]+ of the best sample, worst [0-9.]+\) \| int8 peak [0-9]+ GOP/s' "$OUT"
for tier in exact fast; do
    check "tier $tier has its own section" grep -q "^numerics $tier " "$OUT"
done
rows() { [ "$(grep -c "$1" "$OUT")" = 2 ]; }
check "single-stream decode row in both tiers, with roofline" rows '^| single-stream decode | [0-9.]* tok/s .* roofline [0-9.]* tok/s'
check "TTFT row in both tiers (512-token prompt, 128-token chunks)" rows '^| TTFT, 512-token prompt in 128-token chunks | [0-9.]* s'
check "prefill row against the int8 peak in both tiers" rows '^| prefill, 128-token chunks | [0-9.]* tok/s, .* int8 peak'
for c in 1 4 16 32; do
    check "concurrency $c row in both tiers" rows "^| $c | [0-9.]* | [0-9.]* | [0-9.]* | [0-9.]* | [0-9.]* | [0-9.]*% | [0-9.]*x |"
done

# ---- the linears' floor: in the fast tier per level and for the prefill; n/a in the exact tier (float64) ----
n=$(grep -cE '^\| (1|4|16|32) \| .*x \| [0-9.]+ \([0-9.]+%\) \| [0-9.]+% \|$' "$OUT")
check "a linears' floor (with its compute-bound share) on the 4 fast-tier levels" [ "$n" = 4 ]
n=$(grep -cE '^\| (1|4|16|32) \| .*x \| n/a \(float64 linears\) \| n/a \|$' "$OUT")
check "no floor on the 4 exact-tier levels (float64 linears have no probed peak)" [ "$n" = 4 ]
check "the fast prefill's floor row" grep -qE '^\| prefill, its linears. floor \| [0-9.]+ s of the [0-9.]+ s \([0-9.]+% of the floor compute-bound\) \| bytes or operations per call \| [0-9.]+% \|$' "$OUT"
check "the exact prefill's floor row says n/a" grep -q '^| prefill, its linears. floor | n/a: float64 linears' "$OUT"
shares=$(grep '^|' "$OUT" | grep -oE '\([0-9]+(\.[0-9]+)?%' | tr -d '(%' | awk '$1 < 0 || $1 > 100' | tr '\n' ' ')
if [ -z "$shares" ]; then ok "every compute-bound share is in [0, 100]"; else bad "compute-bound shares outside [0, 100]: $shares" "$OUT"; fi

# ---- every percentage of a limit in (0, 100] and no warning ----
pcts=$(grep '^|' "$OUT" | grep -oE ' [0-9]+(\.[0-9]+)?%' | tr -d ' %')
n=$(echo "$pcts" | grep -c .)
check "17 percentages of a limit printed (exact: 2 + 4 levels; fast: 3 + 4 levels x 2)" [ "$n" = 17 ]
badp=$(echo "$pcts" | awk '$1 <= 0 || $1 > 100' | tr '\n' ' ')
if [ -z "$badp" ]; then ok "every % is in (0, 100]"; else bad "percentages outside (0, 100]: $badp" "$OUT"; fi
if grep -q WARNING "$OUT"; then bad "no ratio above 100% (warnings printed)" "$OUT"; else ok "no over-100% warning"; fi

# ---- the JSON record: complete, and its ratios recomputed from raw figures ----
cat > "$TMP/check.mjs" <<'EOF'
import { readFileSync } from "node:fs";
const j = JSON.parse(readFileSync(process.argv[2], "utf8")), errs = [];
const near = (a, b, what) => { if (!(Math.abs(a - b) <= 1e-6 * Math.max(1, Math.abs(b)))) errs.push(`${what}: ${a} vs ${b}`); };
if (j.schema !== "dsflash-bench-serve/1") errs.push("schema");
if (!(j.limits.read_bw_gbs > 0 && j.limits.int8_peak_gops > 0)) errs.push("limits");
if (j.tiers.map(t => t.numerics).join() !== "exact,fast") errs.push("tiers " + j.tiers.map(t => t.numerics));
for (const t of j.tiers) {
    if (t.concurrency.map(c => c.conc).join() !== "1,4,16,32") errs.push("levels");
    const c1 = t.concurrency[0];
    for (const c of t.concurrency) {
        near(c.tok_s, c.conc / c.step_s_median, `${t.numerics} c${c.conc} tok/s`);
        near(c.roofline_tok_s, c.conc * j.limits.read_bw_gbs * 1e9 / c.bytes_per_step, `${t.numerics} c${c.conc} roofline`);
        near(c.pct_roofline, 100 * c.tok_s / c.roofline_tok_s, `${t.numerics} c${c.conc} %`);
        near(c.vs_conc1, c.tok_s / c1.tok_s, `${t.numerics} c${c.conc} vs 1`);
        if (!(c.bytes_per_step > 0 && c.steps === 3)) errs.push(`${t.numerics} c${c.conc} bytes/steps`);
    }
    // a batch touches at least the weights of one row: bytes per step never shrink with more rows
    for (let i = 1; i < 4; i++) if (t.concurrency[i].bytes_per_step < t.concurrency[0].bytes_per_step) errs.push("bytes shrink");
    const p = t.prefill;
    if (p.prompt_tokens !== 512 || p.chunk !== 128) errs.push("prefill shape");
    near(p.gops, 2 * p.macs / p.ttft_s / 1e9, `${t.numerics} prefill GOP/s`);
    near(p.pct_int8_peak, 100 * p.gops / j.limits.int8_peak_gops, `${t.numerics} prefill %`);
    // the linears' floor, recomputed from the listed calls: per call max(bytes / BW, 2 macs / peak)
    const L = j.limits, peak = { int8: L.int8_peak_gops, f32: L.f32_peak_gops, bf16: L.bf16_peak_gops };
    const floorOf = (calls) => calls.some(c => !(c.class in peak)) ? null
        : calls.reduce((a, c) => a + c.calls * Math.max(c.bytes / (L.read_bw_gbs * 1e9), 2 * c.macs / (peak[c.class] * 1e9)), 0);
    for (const [what, e, n, secs] of [...t.concurrency.map(c => [`c${c.conc}`, c, c.steps, c.step_s_median]),
                                      ["prefill", p, 1, p.ttft_s]]) {
        if (!(e.linear_calls.length > 0 && e.linear_calls_lost === 0)) errs.push(`${t.numerics} ${what}: no calls tallied`);
        const f = floorOf(e.linear_calls);
        if (t.numerics === "exact") { if (e.linear_floor_s !== null) errs.push(`exact ${what}: a floor over float64 calls`); continue; }
        if (f === null || e.linear_floor_s === null) { errs.push(`fast ${what}: no floor`); continue; }
        near(e.linear_floor_s, f / n, `fast ${what} floor`);
        near(e.pct_linear_floor, 100 * e.linear_floor_s / secs, `fast ${what} % of floor`);
        if (!(e.linear_floor_compute_s >= 0 && e.linear_floor_compute_s <= e.linear_floor_s * (1 + 1e-9))) errs.push(`fast ${what} compute share`);
    }
}
if (!(j.limits.f32_peak_gops > 0 && j.limits.bf16_peak_gops > 0)) errs.push("float peaks");
if (errs.length) { console.log(errs.join("\n")); process.exit(1); }
EOF
if node "$TMP/check.mjs" "$JSON" > "$TMP/json.log" 2>&1; then ok "--json record complete, ratios recompute from raw figures"
else bad "--json record complete, ratios recompute from raw figures" "$TMP/json.log"; fi
check "no temporary file left beside the JSON" bash -c "[ ! -e '$JSON.tmp' ]"

# ---- --profile: one row per phase, and the phases add up to the step they bracket ----
check "no profile without --profile" bash -c "! grep -q 'per-phase profile' '$OUT'"
POUT=$TMP/profile.txt
PJSON=$TMP/profile.json
if "$B" perf serve --model "$TMP/tiny" --threads 2 --numerics fast --quick --profile --json "$PJSON" > "$POUT" 2> "$TMP/perr.log"; then
    ok "perf serve --profile exits 0"
else
    bad "perf serve --profile exits 0" "$TMP/perr.log"
fi
check "--profile prints the per-phase table" grep -q '^per-phase profile, numerics fast' "$POUT"
nph=$(awk '/^per-phase profile/{on=1; next} on && /^\| step \(mean\)/{exit} on && /^\| [a-zA-Z]/' "$POUT" | grep -vc '^| phase |')
check "13 phase rows (other, attention parts, MoE parts, mHC, Engram, head)" [ "$nph" = 13 ]
# exclusive phase times are charged between the two profiler reads that bracket each step, the step
# time by the bench's own clock just inside them: per level they must agree within 5% (+0.05 ms)
sums=$(awk -F'|' '/^per-phase profile/{on=1; next}
    on && /^\| step \(mean\)/ { for (i = 3; i < NF; i++) { st = $i + 0; d = s[i] - st; if (d < 0) d = -d;
        if (d > 0.05 * st + 0.05 || s[i] <= 0) { print "level " i-2 ": phases " s[i] " ms vs step " st " ms" } } exit }
    on && /^\| [a-zA-Z]/ && !/^\| phase/ { for (i = 3; i < NF; i++) { split($i, a, " "); s[i] += a[1] } }' "$POUT")
if [ -z "$sums" ]; then ok "phases add up to the mean step at every level"; else bad "phases add up to the mean step: $sums" "$POUT"; fi
moe=$(grep '^| moe experts |' "$POUT" | awk -F'|' '{split($3, a, " "); print a[1] + 0}')
check "the MoE experts phase is charged (tiny has routed experts)" awk -v v="${moe:-0}" 'BEGIN { exit !(v > 0) }'
pcore=$(grep '^| attn core |' "$POUT" | awk -F'|' '{split($(NF-1), a, " "); print a[1] + 0}')
check "the profile has a prefill-chunk column with the attention core charged" \
    bash -c "grep -q '^| phase |.* prefill chunk |' '$POUT' && awk -v v='${pcore:-0}' 'BEGIN { exit !(v > 0) }'"
cat > "$TMP/pjson.mjs" <<'EOF'
import { readFileSync } from "node:fs";
const j = JSON.parse(readFileSync(process.argv[2], "utf8"));
const errs = [];
for (const lv of j.tiers[0].concurrency) {
    // the floor split by phase adds up to the level's floor
    const pf = Object.values(lv.phase_floor_s || {});
    if (pf.length !== 13) errs.push(`conc ${lv.conc}: ${pf.length} phases in phase_floor_s, expected 13`);
    const fsum = pf.reduce((a, b) => a + b, 0);
    if (!(Math.abs(fsum - lv.linear_floor_s) <= 1e-9 * lv.linear_floor_s + 1e-12))
        errs.push(`conc ${lv.conc}: phase floors sum to ${fsum} s, the level's floor is ${lv.linear_floor_s} s`);
    const ph = lv.phase_s || {};
    const v = Object.values(ph);
    if (v.length !== 13) errs.push(`conc ${lv.conc}: ${v.length} phases in phase_s, expected 13`);
    const sum = v.reduce((a, b) => a + b, 0);
    if (!(Math.abs(sum - lv.step_s_mean) <= 0.05 * lv.step_s_mean + 5e-5))
        errs.push(`conc ${lv.conc}: phases sum to ${sum} s, mean step ${lv.step_s_mean} s`);
}
if (errs.length) { console.log(errs.join("\n")); process.exit(1); }
EOF
fl=$(awk '/^linears. floor per phase/{on=1; next} on && /^$/{exit} on && /^\| [a-zA-Z]/ && !/^\| phase/' "$POUT")
check "--profile prints the linears' floor per phase (the phases with linears)" \
    bash -c "[ \$(printf '%s\n' \"\$1\" | grep -c .) -ge 5 ]" _ "$fl"
# a share above 100% is possible here and only here: tiny's weights (a few MiB) stay in the caches,
# where a phase's linears can beat the memory bandwidth its floor assumes (a real checkpoint's never do)
badf=$(printf '%s\n' "$fl" | grep -oE '\([0-9]+(\.[0-9]+)?%' | tr -d '(%' | awk '$1 <= 0' | tr '\n' ' ')
if [ -n "$fl" ] && [ -z "$badf" ]; then ok "every phase's floor is a positive share of its time"; else bad "phase floors not positive: $badf" "$POUT"; fi
if node "$TMP/pjson.mjs" "$PJSON" > "$TMP/pjson.log" 2>&1; then ok "--json carries the profile per level (13 phases adding up to the mean step)"
else bad "--json carries the profile per level" "$TMP/pjson.log"; fi

# ---- refusals: exit 2, message naming the flag; no partial JSON ----
refuse() {   # name, expected rc, expected message, args...
    local name=$1 want=$2 msg=$3; shift 3
    "$B" perf serve "$@" > "$TMP/r.out" 2> "$TMP/r.err"; local got=$?
    if [ "$got" = "$want" ] && grep -q -- "$msg" "$TMP/r.err"; then ok "$name"; else bad "$name (rc $got)" "$TMP/r.err"; fi
}
refuse "--numerics bogus is refused" 2 "--numerics: expected exact, fast or both, got 'bogus'" --model "$TMP/tiny" --numerics bogus
refuse "--model is required" 2 "--model: DIR is required" --quick
refuse "--threads 0 is refused" 2 "--threads: expected an integer in \[1, 1024\], got '0'" --model "$TMP/tiny" --threads 0
refuse "unknown flag is refused" 2 "--bogus: unknown option" --model "$TMP/tiny" --bogus
refuse "missing checkpoint folder is an I/O error" 3 "dsflash perf serve:" --model "$TMP/none" --quick
refuse "unwritable --json is an I/O error" 3 "--json $TMP/nodir/x.json: cannot write the file" \
    --model "$TMP/tiny" --quick --numerics fast --json "$TMP/nodir/x.json"
check "no partial JSON under the asked name" bash -c "[ ! -e '$TMP/nodir/x.json' ]"
finish
