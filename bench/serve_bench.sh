#!/usr/bin/env bash
# Benchmark (not a test): start `dsflash serve` on a checkpoint (default: the mini checkpoint,
# generated once with `dsflash mkmodel --config mini` into $XDG_CACHE_HOME/dsflash/mini or
# ~/.cache/dsflash/mini), run the `dsflash bench` concurrency sweep (TOOLS.md §4) against it, plot
# it with `dsflash bench-plot`, stop the server (by pid).  Results: docs/bench/sweep-LABEL.json and
# docs/bench/sweep-LABEL.{svg,csv}.
# usage: bench/serve_bench.sh [MODEL_DIR] [extra `dsflash bench` options, e.g. --label NAME]
# Environment: DS_BENCH_CONCURRENCY (1,2,4,8,16,32), DS_BENCH_PROMPT_TOKENS (256),
# DS_BENCH_OUTPUT_TOKENS (64), DS_BENCH_REPEATS (2), KV_CACHE_MEMORY (4GiB), SERVE_FLAGS.
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
    --kv-cache-memory "${KV_CACHE_MEMORY:-4GiB}" ${SERVE_FLAGS:-} >"$LOG" 2>&1 &
PID=$!
trap 'kill -TERM $PID 2>/dev/null; wait $PID 2>/dev/null || true' EXIT
for _ in $(seq 1 3000); do grep -q '^READY ' "$LOG" && break; kill -0 $PID || { cat "$LOG"; exit 1; }; sleep 0.2; done
grep -E '^KV cache (size|detail)' "$LOG" || true
mkdir -p docs/bench
"$BIN" bench --base-url "http://127.0.0.1:$PORT" --corpus-file tests/data/bench-corpus.txt \
    --concurrency "${DS_BENCH_CONCURRENCY:-1,2,4,8,16,32}" --prompt-tokens "${DS_BENCH_PROMPT_TOKENS:-256}" \
    --output-tokens "${DS_BENCH_OUTPUT_TOKENS:-64}" --repeats "${DS_BENCH_REPEATS:-2}" \
    --json-out "docs/bench/sweep-$LABEL.json" "${label_arg[@]}" "$@"
"$BIN" bench-plot "docs/bench/sweep-$LABEL.json" -o docs/bench --prefix "sweep-$LABEL"
