#!/usr/bin/env bash
# `dsflash bench` and `dsflash bench-plot` end to end (TOOLS.md §4): against a stub OpenAI-compatible
# server written in Python (a second endpoint shape, known delays and counters: openai_stub.py) and
# against a live `dsflash serve` of the tiny model.  Results are checked by check_bench.py (field
# names from §4.4, values from the stub's script) and the SVG by xmllint.  Short sweeps keep CI fast.
set -u
cd "$(dirname "$0")/../.."
. tests/tools/lib.sh
. tests/server/serve_lib.sh
T=$DS_TEST_TMP/tools13-bench
rm -rf "$T"; mkdir -p "$T"
CORPUS=tests/data/bench-corpus.txt
PY=python3; [ -x /usr/bin/python3 ] && PY=/usr/bin/python3
CHK() { "$PY" tests/tools13/check_bench.py "$@"; }
STUB_PIDS=()
cleanup() { for p in "${STUB_PIDS[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; stop_server; }
trap cleanup EXIT

# start_stub NAME [stub flags]: sets STUB (its base URL)
start_stub() {
    local name=$1; shift
    rm -f "$T/$name.port"
    "$PY" tests/tools13/openai_stub.py --port-file "$T/$name.port" --prompt-log "$T/$name.prompts" "$@" 2>"$T/$name.stub.log" &
    STUB_PIDS+=($!)
    for _ in $(seq 1 100); do [ -s "$T/$name.port" ] && break; sleep 0.05; done
    STUB="http://127.0.0.1:$(cat "$T/$name.port" 2>/dev/null)"
}
# bench_run NAME [flags]: runs bench, output in $T/NAME.out, sets RC
bench_run() {
    local name=$1; shift
    "$B" bench --corpus-file "$CORPUS" --json-out "$T/$name.json" "$@" >"$T/$name.out" 2>&1
    RC=$?
}

for t in "$B" xmllint "$PY"; do
    command -v "$t" >/dev/null || bad "required tool $t is missing (scripts/install-deps.sh)"
done

# ---- 1. the stub, full shape: timing, acceptance, calibration, prompt set, bearer key ----
start_stub full --api-key sk-test --ttft 0.15 --itl 0.02
bench_run full --base-url "$STUB" --api-key sk-test --concurrency 1,2 --prompt-tokens 48 --output-tokens 12 \
    --repeats 2 --label stub-full
expect_rc "bench against the stub" 0 "$RC" "$T/full.out"
check "JSON shape of TOOLS.md §4.4" CHK shape "$T/full.json" 1,2 48 12 2
check "calibration exact 2/2, max_dev 0" CHK field "$T/full.json" calibration '{"exact":2,"n":2,"max_dev":0,"overlap_chars":0}'
check "TTFT / TPOT / ITL / per-stream rate from the stub's 0.15 s and 20 ms delays" CHK stub_timing "$T/full.json" 0.15 0.02
check "acceptance A = 1 + 15/10 = 2.5, rate 15/30 from /metrics deltas" CHK accept "$T/full.json" 2.5 0.5
check "speedup and efficiency relative to c=1" CHK speedup "$T/full.json"
check "prompts: exactly 48 stub tokens, 2 distinct, warm-up sent, front matter skipped, suffixes rotate" \
    CHK prompts "$T/full.prompts" 48 2
check "server instance id and max_num_seqs recorded" CHK field "$T/full.json" server.max_num_seqs 64
check "no flags on a clean run" CHK flags "$T/full.json" 2 prefix_reuse absent
check "the console table has the §4.4 columns" grep -q '| conc | per-stream tok/s | step ms | aggregate tok/s | speedup | A    | TTFT s  | flags |' "$T/full.out"
check "plain progress lines (not a TTY): done/total requests, rate, ETA" grep -qE '^\[bench\] c=2 rep 2/2  8/8 req  100\.0%  [0-9.]+ req/s  ETA' "$T/full.out"
DSFLASH_PROGRESS=tty "$B" bench --corpus-file "$CORPUS" --base-url "$STUB" --api-key sk-test --concurrency 1,2 \
    --prompt-tokens 16 --output-tokens 6 --repeats 2 --json-out "$T/tty.json" >/dev/null 2>"$T/tty.err"
check "TTY progress: one line rewritten in place (carriage return, done/total, rate, ETA)" \
    grep -qE $'\r\\[bench\\] c=[12] rep [12]/2  [0-9]/8 req  [0-9.]+%  [0-9.]+ req/s  ETA' "$T/tty.err"
check "TTY progress: no newline on stderr (the line is erased at the end)" test "$(wc -l <"$T/tty.err")" = 0
bench_run nokey --base-url "$STUB" --concurrency 1 --prompt-tokens 16 --output-tokens 2 --repeats 1
expect_rc "without the bearer key the stub answers 401: exit 1" 1 "$RC" "$T/nokey.out"

# ---- 2. a server with only /health, /v1/models and /v1/completions (tokenizer elsewhere) ----
start_stub minimal --minimal --ttft 0.05 --itl 0.01
MIN=$STUB
start_stub tok --api-key sk-test   # a tokenizer front end (same stub tokenizer)
bench_run minimal --base-url "$MIN" --tokenize-url "$STUB" --api-key sk-test \
    --concurrency 1,2 --prompt-tokens 40 --output-tokens 6 --repeats 1 --label stub-minimal
expect_rc "bench against a server without /tokenize, /server_info, /metrics" 0 "$RC" "$T/minimal.out"
check "minimal server: no server_info snapshot" CHK field "$T/minimal.json" server_info null
check "minimal server: A = 1.0 without speculation counters" CHK accept "$T/minimal.json" 1.0 0.0
check "minimal server: calibration still exact through --tokenize-url" CHK field "$T/minimal.json" calibration.exact 2

# ---- 3. fallback acceptance formula (no drafts counter): A = acc/draft_tokens * S + 1, S = 3 ----
start_stub nodrafts --no-drafts-counter
bench_run nodrafts --base-url "$STUB" --concurrency 1 --prompt-tokens 24 --output-tokens 4 --repeats 1
expect_rc "bench, stub without a drafts counter" 0 "$RC" "$T/nodrafts.out"
check "fallback A = 15/30 * 3 + 1 = 2.5 (S from /server_info)" CHK accept "$T/nodrafts.json" 2.5 0.5
bench_run nodrafts_s --base-url "$STUB" --concurrency 1 --prompt-tokens 24 --output-tokens 4 --repeats 1 --spec-tokens 5
check "--spec-tokens 5 overrides S: A = 15/30 * 5 + 1 = 3.5" CHK accept "$T/nodrafts_s.json" 3.5 0.5

# ---- 3b. corpus front matter and suffix files ----
mkdir -p "$T/suf"; printf '\n\nSECOND?' >"$T/suf/2-b"; printf '\n\nFIRST?' >"$T/suf/1-a"
start_stub corpus
bench_run suffix --base-url "$STUB" --concurrency 2 --prompt-tokens 24 --output-tokens 2 --repeats 1 --suffix-dir "$T/suf"
check "--suffix-dir: files in sorted name order, rotating by request" CHK prompt_of "$T/corpus.prompts" 1 "[req-00001] " "SECOND?"
check "--suffix-dir: request 0 gets the first file" CHK prompt_of "$T/corpus.prompts" 0 "[req-00000] Margaret" "FIRST?"
bench_run keep --base-url "$STUB" --concurrency 1 --prompt-tokens 24 --output-tokens 2 --repeats 1 --keep-preamble
check "--keep-preamble: the slice starts at the file's first line" CHK prompt_of "$T/corpus.prompts" 0 "[req-00000] Title: The Lighthouse" "exactly."
bench_run mark --base-url "$STUB" --concurrency 1 --prompt-tokens 24 --output-tokens 2 --repeats 1 \
    --corpus-mark "Front matter: this header is not part of the corpus and must be skipped by the benchmark."
check "--corpus-mark: the slice starts after the mark line" CHK prompt_of "$T/corpus.prompts" 0 "[req-00000] *** START OF" "exactly."
bench_run both --base-url "$STUB" --concurrency 1 --keep-preamble --corpus-mark X
expect_rc "--corpus-mark with --keep-preamble" 2 "$RC" "$T/both.out"

# ---- 4. prefix reuse is flagged when the cache is not reset ----
start_stub cache
bench_run reuse --base-url "$STUB" --concurrency 1,2 --prompt-tokens 24 --output-tokens 3 --repeats 1 --reset-prefix-cache off
expect_rc "bench --reset-prefix-cache off" 0 "$RC" "$T/reuse.out"
check "second level re-sends the prompts: prefix_reuse flagged" CHK flags "$T/reuse.json" 2 prefix_reuse present
bench_run reset --base-url "$STUB" --concurrency 1,2 --prompt-tokens 24 --output-tokens 3 --repeats 1
check "with the reset (auto), no prefix_reuse" CHK flags "$T/reset.json" 2 prefix_reuse absent

# ---- 5. degenerate output, invalid runs and failed requests ----
start_stub rep --repetitive --itl 0.001
bench_run rep --base-url "$STUB" --concurrency 2 --prompt-tokens 24 --output-tokens 120 --repeats 1
expect_rc "bench, repetitive output" 0 "$RC" "$T/rep.out"
check "repetitive output: degenerate flag, uniq2 < 0.5, two 300-character samples" CHK degenerate "$T/rep.json" 2
start_stub restart --restart-after 2
bench_run restart --base-url "$STUB" --concurrency 1,2 --prompt-tokens 24 --output-tokens 3 --repeats 1
expect_rc "instance_id changed mid-run: exit 1" 1 "$RC" "$T/restart.out"
check "restart: JSON says valid false" CHK field "$T/restart.json" valid false
start_stub fallback --kernel-fallback
bench_run fallback --base-url "$STUB" --concurrency 1 --prompt-tokens 24 --output-tokens 3 --repeats 1
expect_rc "kernel_fallback_total > 0: exit 1" 1 "$RC" "$T/fallback.out"
check "kernel fallback: JSON says valid false" CHK field "$T/fallback.json" valid false
start_stub short --short-by-one
bench_run short --base-url "$STUB" --concurrency 2 --prompt-tokens 24 --output-tokens 4 --repeats 1
expect_rc "n_out != output_tokens with ignore_eos: exit 1" 1 "$RC" "$T/short.out"
check "short outputs: fail>0 flagged, 0 ok" CHK flags "$T/short.json" 2 'fail>0' present
bench_run short_ok --base-url "$STUB" --concurrency 2 --prompt-tokens 24 --output-tokens 4 --repeats 1 --no-ignore-eos
expect_rc "--no-ignore-eos accepts the shorter output" 0 "$RC" "$T/short_ok.out"
check "--no-ignore-eos is recorded" CHK field "$T/short_ok.json" ignore_eos false

start_stub slow --ttft 3
bench_run slow --base-url "$STUB" --concurrency 1 --prompt-tokens 24 --output-tokens 2 --repeats 1 --timeout 0.5
expect_rc "--timeout 0.5 against a 3 s first token: exit 1" 1 "$RC" "$T/slow.out"
check "the timeout is reported as such" grep -q "timed out" "$T/slow.out"
check "no result file after a failed warm-up" test ! -e "$T/slow.json"

# ---- 6. usage errors and unreachable servers (TOOLS.md §0 exit codes) ----
FULL=http://127.0.0.1:$(cat "$T/full.port")
bench_run e1 --base-url "$FULL" --concurency 1;            expect_rc "unknown flag" 2 "$RC" "$T/e1.out"
bench_run e2 --base-url "$FULL" --conc 1;                  expect_rc "abbreviated flag" 2 "$RC" "$T/e2.out"
bench_run e3 --base-url "$FULL" --concurrency 0;           expect_rc "--concurrency 0" 2 "$RC" "$T/e3.out"
bench_run e4 --base-url "$FULL" --concurrency 1,x;         expect_rc "--concurrency 1,x" 2 "$RC" "$T/e4.out"
bench_run e5 --base-url "$FULL" --prompt-tokens -3;        expect_rc "--prompt-tokens -3" 2 "$RC" "$T/e5.out"
bench_run e6 --base-url "$FULL" --reset-prefix-cache yes;  expect_rc "--reset-prefix-cache yes" 2 "$RC" "$T/e6.out"
bench_run e7 --base-url ftp://x;                           expect_rc "--base-url ftp://x" 2 "$RC" "$T/e7.out"
bench_run e8 --base-url "$FULL" --corpus-mark NOPE --concurrency 1 --api-key sk-test
expect_rc "--corpus-mark not in the corpus" 2 "$RC" "$T/e8.out"
check "the mark error names the mark" grep -q "no line equal to 'NOPE'" "$T/e8.out"
"$B" bench --base-url "$FULL" >"$T/e9.out" 2>&1;           expect_rc "--corpus-file missing" 2 $? "$T/e9.out"
"$B" bench --corpus-file "$T/none.txt" --base-url "$FULL" --api-key sk-test >"$T/e10.out" 2>&1
expect_rc "corpus file does not exist" 5 $? "$T/e10.out"
DEAD=$(free_port)
bench_run e11 --base-url "http://127.0.0.1:$DEAD" --concurrency 1; expect_rc "unreachable server" 3 "$RC" "$T/e11.out"
check "the unreachable error names the URL" grep -q "127.0.0.1:$DEAD" "$T/e11.out"
bench_run e12 --base-url "$FULL" --api-key sk-test --model other --concurrency 1
expect_rc "--model not served" 1 "$RC" "$T/e12.out"
bench_run e13 --base-url "$FULL" --api-key sk-test --concurrency 1,128
expect_rc "max_num_seqs 64 below --concurrency 128" 1 "$RC" "$T/e13.out"
for m in kernels decode serve; do
    "$B" bench "$m" >"$T/old-$m.out" 2>&1
    expect_rc "bench $m (moved)" 2 $? "$T/old-$m.out"
    check "bench $m names 'dsflash perf $m'" grep -q "dsflash perf $m" "$T/old-$m.out"
done
"$B" bench --help >"$T/help.out" 2>&1;                     expect_rc "bench --help" 0 $? "$T/help.out"
"$B" perf --help >"$T/perfhelp.out" 2>&1;                  expect_rc "perf --help" 0 $? "$T/perfhelp.out"
check "no result file is left by failed runs" test ! -e "$T/e11.json"

# ---- 7. live dsflash serve of the tiny model ----
if start_server "$T/serve.log" --enable-dev-endpoints; then
    bench_run live --base-url "$BASE" --concurrency 1,2 --prompt-tokens 40 --output-tokens 8 --repeats 1 --label tiny
    expect_rc "bench against dsflash serve (tiny)" 0 "$RC" "$T/live.out"
    check "live: JSON shape" CHK shape "$T/live.json" 1,2 40 8 1
    check "live: calibration exact 2/2 through our /tokenize" CHK field "$T/live.json" calibration.exact 2
    check "live: usage.prompt_tokens equals the calibrated count" CHK flags "$T/live.json" 2 prompt_len_mismatch absent
    check "live: no prefix reuse (dev reset endpoint used)" CHK flags "$T/live.json" 2 prefix_reuse absent
    IID=$(curl -s --noproxy '*' "$BASE/health" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["instance_id"])')
    check "live: the server's instance id is recorded" CHK field "$T/live.json" server.instance_id "\"$IID\""
    check "live: valid run" CHK field "$T/live.json" valid true
else
    bad "dsflash serve did not start"
fi
stop_server

# ---- 8. bench-plot ----
"$B" bench-plot "$T/full.json" "$T/minimal.json" -o "$T/plot" >"$T/plot.out" 2>&1
expect_rc "bench-plot two results" 0 $? "$T/plot.out"
check "SVG is well-formed XML (xmllint)" xmllint --noout "$T/plot/conc.svg"
npl=$(xmllint --xpath "count(//*[local-name()='polyline'][@class='series'])" "$T/plot/conc.svg" 2>/dev/null)
check "3 panels x 2 files = 6 series polylines (got $npl)" test "$npl" = 6
for lab in stub-full stub-minimal; do
    for p in per_stream total_decode ttft; do
        n=$(xmllint --xpath "count(//*[local-name()='polyline'][@data-label='$lab'][@data-panel='$p'])" "$T/plot/conc.svg" 2>/dev/null)
        check "series $lab in panel $p" test "$n" = 1
    done
done
pts=$(xmllint --xpath "string(//*[local-name()='polyline'][@data-label='stub-full'][@data-panel='total_decode']/@points)" "$T/plot/conc.svg")
check "stub-full aggregate series has one point per level (2)" test "$(echo "$pts" | wc -w)" = 2
check "CSV columns and values match the JSON results" CHK csv "$T/plot/conc.csv" "$T/full.json" "$T/minimal.json"
"$B" bench-plot "$T/full.json" -o "$T/plot2" --prefix sweep >/dev/null 2>&1
check "--prefix sweep writes sweep.svg" test -s "$T/plot2/sweep.svg"
echo '{"schema":"other"}' >"$T/notbench.json"
"$B" bench-plot "$T/notbench.json" -o "$T/plot3" >"$T/p1.out" 2>&1; expect_rc "bench-plot of a non-bench JSON" 1 $? "$T/p1.out"
check "the error names the schema field" grep -q "schema" "$T/p1.out"
"$B" bench-plot "$T/missing.json" -o "$T/plot3" >"$T/p2.out" 2>&1; expect_rc "bench-plot of a missing file" 5 $? "$T/p2.out"
"$B" bench-plot "$T/full.json" -o "$T/plot3" --format png >"$T/p3.out" 2>&1; expect_rc "bench-plot --format png (refused)" 2 $? "$T/p3.out"
"$B" bench-plot "$T/full.json" >"$T/p4.out" 2>&1; expect_rc "bench-plot without -o" 2 $? "$T/p4.out"
check "no partial SVG after failures" test ! -e "$T/plot3/conc.svg"
finish
