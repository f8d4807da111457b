#!/usr/bin/env bash
# Benchmark (not a test): start `dsflash serve` on a checkpoint (default: the mini checkpoint,
# generated once with `dsflash mkmodel --config mini` into $XDG_CACHE_HOME/dsflash/mini or
# ~/.cache/dsflash/mini), run the concurrency sweep 1..32, stop the server (by pid).
# usage: bench/serve_bench.sh [MODEL_DIR] [extra serve_bench.mjs options]
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
PORT=$(node -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close();});')
LOG=$(mktemp)
"$BIN" serve --model "$MODEL" --port "$PORT" --no-enable-prefix-caching --max-num-seqs 32 --self-check quick \
    --kv-cache-memory "${KV_CACHE_MEMORY:-4GiB}" ${SERVE_FLAGS:-} >"$LOG" 2>&1 &
PID=$!
trap 'kill -TERM $PID 2>/dev/null; wait $PID 2>/dev/null || true' EXIT
for _ in $(seq 1 3000); do grep -q '^READY ' "$LOG" && break; kill -0 $PID || { cat "$LOG"; exit 1; }; sleep 0.2; done
grep -E '^KV cache (size|detail)' "$LOG"
node bench/serve_bench.mjs "http://127.0.0.1:$PORT" "$@"
