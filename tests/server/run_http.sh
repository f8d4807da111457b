#!/usr/bin/env bash
# Raw-HTTP suites against live servers: the §10.6 error rows (server with small limits), then
# 64 streams with half the clients dropped and the admission gate (server with default limits).
set -u
cd "$(dirname "$0")/../.."
. tests/server/serve_lib.sh
pass=0; fail=0
tally() { # parse the node suite's closing line
    local line; line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$1" | tail -1)
    if [ -z "$line" ]; then fail=$((fail + 1)); return; fi
    pass=$((pass + $(echo "$line" | cut -d' ' -f1))); fail=$((fail + $(echo "$line" | cut -d' ' -f3)))
}
OUT=$DS_TEST_TMP/http-suite.out
if start_server "$DS_TEST_TMP/serve-http-a.log" --api-key k --max-request-body 64KiB --max-pending-requests 6 --kv-cache-memory 256MiB; then
    "$NODE" tests/server/http_rows.mjs "$BASE" | tee "$OUT"; tally "$OUT"
else fail=$((fail + 1)); fi
stop_server
if start_server "$DS_TEST_TMP/serve-http-b.log" --max-num-batched-tokens 256 --kv-cache-memory 256MiB; then
    "$NODE" tests/server/load_tests.mjs "$BASE" | tee "$OUT"; tally "$OUT"
else fail=$((fail + 1)); fi
stop_server
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
