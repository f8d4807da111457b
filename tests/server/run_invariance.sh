#!/usr/bin/env bash
# Invariance of greedy output (SERVING.md §15 chunking / prefix cache / batching rows) on live
# servers: baseline = prefix cache off, concurrency 1, default chunking; then concurrency 8 and
# 32, prefix cache on (a second pass hits the cache), and small chunks with block size 16/32.
# These run under the serve default, the fast numerics tier (whose /server_info must say so); one
# more server on `--numerics exact` checks concurrency 8 against its own concurrency-1 baseline.
set -u
cd "$(dirname "$0")/../.."
. tests/server/serve_lib.sh
D=$DS_TEST_TMP/invariance
rm -rf "$D"; mkdir -p "$D"
CONCS="8 32"
if [ "${BUILD:-release}" = asan ]; then export INV_PROMPTS=8; CONCS="8"; fi
failed_start=0
collect() { "$NODE" tests/server/invariance.mjs collect "$BASE" "$1" "$D/$2.json" || failed_start=$((failed_start + 1)); }
KV=(--kv-cache-memory 256MiB)
if start_server "$D/a.log" --no-enable-prefix-caching "${KV[@]}"; then
    collect 1 baseline
    for c in $CONCS; do collect "$c" "conc-$c"; done
else failed_start=$((failed_start + 1)); fi
stop_server
if start_server "$D/b.log" "${KV[@]}"; then
    collect 1 prefix-on-pass1
    collect 1 prefix-on-pass2
    collect "${CONCS##* }" prefix-on-conc
else failed_start=$((failed_start + 1)); fi
stop_server
if start_server "$D/c.log" --block-size 16 --max-num-batched-tokens 48 "${KV[@]}"; then
    collect 4 chunk48-bs16
else failed_start=$((failed_start + 1)); fi
stop_server
if start_server "$D/d.log" --block-size 32 --max-num-batched-tokens 96 --max-num-seqs 8 --no-admission-gate "${KV[@]}"; then
    collect 8 chunk96-bs32-nogate
else failed_start=$((failed_start + 1)); fi
stop_server
files=()
for f in "$D"/*.json; do [ "$(basename "$f")" = baseline.json ] || files+=("$f"); done
if [ -f "$D/baseline.json" ]; then
    "$NODE" tests/server/invariance.mjs compare "$D/baseline.json" "${files[@]}" | tee "$D/compare.out"
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$D/compare.out" | tail -1)
    p=$(echo "$line" | cut -d' ' -f1); f=$(echo "$line" | cut -d' ' -f3)
    [ -n "$line" ] || { p=0; f=1; }   # the comparison printed no result: nothing was checked
else p=0; f=1; fi
# the tier the default server ran, as echoed in its configuration line (also /server_info)
if grep -q '"numerics":"fast"' "$D/a.log"; then p=$((p + 1)); echo "ok default serve echoes numerics fast"
else f=$((f + 1)); echo "FAIL default serve: no \"numerics\":\"fast\" in its configuration line"; fi
# the exact tier: batching invariance within it too
mkdir -p "$D/exact"
if start_server "$D/e.log" --numerics exact --no-enable-prefix-caching "${KV[@]}"; then
    grep -q '"numerics":"exact"' "$D/e.log" || { f=$((f + 1)); echo "FAIL --numerics exact not echoed"; }
    "$NODE" tests/server/invariance.mjs collect "$BASE" 1 "$D/exact/baseline.json" || failed_start=$((failed_start + 1))
    "$NODE" tests/server/invariance.mjs collect "$BASE" 8 "$D/exact/conc-8.json" || failed_start=$((failed_start + 1))
else failed_start=$((failed_start + 1)); fi
stop_server
if [ -f "$D/exact/baseline.json" ] && [ -f "$D/exact/conc-8.json" ]; then
    "$NODE" tests/server/invariance.mjs compare "$D/exact/baseline.json" "$D/exact/conc-8.json" | tee "$D/exact/compare.out"
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$D/exact/compare.out" | tail -1)
    [ -n "$line" ] || line="0 passed, 1 failed"
    p=$((p + $(echo "$line" | cut -d' ' -f1))); f=$((f + $(echo "$line" | cut -d' ' -f3)))
else f=$((f + 1)); echo "FAIL exact-tier invariance: no collections"; fi
f=$((f + failed_start))
echo "$p passed, $f failed"
[ "$f" = 0 ]
