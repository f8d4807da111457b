#!/usr/bin/env bash
# Benchmark (not a test): start `dsflash serve` on a checkpoint (default: the mini checkpoint,
# generated once with `dsflash mkmodel --config mini` into $XDG_CACHE_HOME/dsflash/mini or
# ~/.cache/dsflash/mini), run the `dsflash bench` concurrency sweep (TOOLS.md §4) against it, plot
# it with `dsflash bench-plot`, then the long-context probes against the same server: `dsflash needle`
# (TOOLS.md §5.1, timing of long prefills) and `dsflash kv-walk` (§5.2, 0 deviating positions
# expected); stop the server (by pid).  Results: docs/bench/sweep-LABEL.json,
# docs/bench/sweep-LABEL.{svg,csv}, docs/bench/needle-LABEL.json, docs/bench/kv-walk-LABEL.json.
# usage: bench/serve_bench.sh [MODEL_DIR] [extra `dsflash bench` options, e.g. --label NAME]
# Environment: DS_BENCH_CONCURRENCY (1,2,4,8,16,32), DS_BENCH_PROMPT_TOKENS (256),
# DS_BENCH_OUTPUT_TOKENS (64), DS_BENCH_REPEATS (2), KV_CACHE_MEMORY (4GiB), SERVE_FLAGS,
# DS_BENCH_STAGES (sweep,needle,kvwalk: which stages run, in this order), DS_BENCH_NEEDLE_DOSES
# (8192,16384,32768), DS_BENCH_NEEDLE_REPS (1), DS_BENCH_KVWALK_TOKENS (32768), DS_BENCH_KVWALK_RUNS (2),
# DS_BENCH_PROBE_TIMEOUT (seconds per probe request, 7200: a 32K prefill on a small host is slow),
# DS_BENCH_SPEC_TOKENS (0: the synthetic mini's draft has random weights, so speculation would only
# cost time, and a mini generated before mkmodel marked its draft random fails the start-up probe).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${DSFLASH_BIN:-build/release/dsflash}
MODEL=${1:-}
[ $# -gt 0 ] && shift
if [ -z "$MODEL" ]; then
    MODEL=${XDG_CACHE_HOME:-$HOME/.cache}/dsflash/mini
    if [ ! -f "$MODEL/config.json" ]; then
        echo "serve_bench: generating the mini checkpoint into $MODEL (once; ~14 GiB of work)"
        "$BIN" mkmodel --config mini --out "$MODEL"
    fi
fi
LABEL=mini; label_arg=(--label mini)
for ((i = 1; i <= $#; i++)); do [ "${!i}" = --label ] && { j=$((i + 1)); LABEL=${!j}; label_arg=(); }; done
PORT=$(node -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close();});')
LOG=$(mktemp)
# production setting (max-num-seqs 32, prefix cache on) with the dev endpoint that lets the bench
# reset the prefix cache between levels, so every level measures full prefills
"$BIN" serve --model "$MODEL" --port "$PORT" --max-num-seqs 32 --enable-dev-endpoints --self-check quick \
    --kv-cache-memory "${KV_CACHE_MEMORY:-4GiB}" --num-speculative-tokens "${DS_BENCH_SPEC_TOKENS:-0}" \
    ${SERVE_FLAGS:-} >"$LOG" 2>&1 &
PID=$!
trap 'kill -TERM $PID 2>/dev/null; wait $PID 2>/dev/null; rm -f "$LOG"' EXIT
for _ in $(seq 1 30000); do grep -q '^READY ' "$LOG" && break; kill -0 $PID 2>/dev/null || { cat "$LOG"; exit 1; }; sleep 0.2; done
grep -E '^KV cache (size|detail)' "$LOG" || true
mkdir -p docs/bench
URL="http://127.0.0.1:$PORT"
PROBE_TIMEOUT=${DS_BENCH_PROBE_TIMEOUT:-7200}
run_sweep() {
    "$BIN" bench --base-url "$URL" --corpus-file tests/data/bench-corpus.txt \
        --concurrency "${DS_BENCH_CONCURRENCY:-1,2,4,8,16,32}" --prompt-tokens "${DS_BENCH_PROMPT_TOKENS:-256}" \
        --output-tokens "${DS_BENCH_OUTPUT_TOKENS:-64}" --repeats "${DS_BENCH_REPEATS:-2}" \
        --json-out "docs/bench/sweep-$LABEL.json" "${label_arg[@]}" "$@"
    "$BIN" bench-plot "docs/bench/sweep-$LABEL.json" -o docs/bench --prefix "sweep-$LABEL"
}
run_needle() {
    "$BIN" needle --base-url "$URL" --doses "${DS_BENCH_NEEDLE_DOSES:-8192,16384,32768}" \
        --reps "${DS_BENCH_NEEDLE_REPS:-1}" --timeout "$PROBE_TIMEOUT" --json-out "docs/bench/needle-$LABEL.json"
}
run_kvwalk() {
    "$BIN" kv-walk --base-url "$URL" --tokens "${DS_BENCH_KVWALK_TOKENS:-32768}" \
        --runs "${DS_BENCH_KVWALK_RUNS:-2}" --tol 0 --timeout "$PROBE_TIMEOUT" --json-out "docs/bench/kv-walk-$LABEL.json"
}
rc=0
IFS=, read -r -a stages <<<"${DS_BENCH_STAGES:-sweep,needle,kvwalk}"
for stage in "${stages[@]}"; do
    echo "== serve_bench: $stage ($(date -u +%H:%M:%S) UTC)"
    case "$stage" in
        sweep) run_sweep "$@" || rc=1 ;;
        needle) run_needle || rc=1 ;;
        kvwalk) run_kvwalk || rc=1 ;;
        *) echo "serve_bench: unknown stage '$stage' in DS_BENCH_STAGES (sweep, needle, kvwalk)"; rc=2 ;;
    esac
done
exit $rc
