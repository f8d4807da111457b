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
if start_server "$DS_TEST_TMP/serve-http-c.log" --kv-cache-memory 256MiB; then
    "$NODE" tests/server/hardening.mjs "$BASE" | tee "$OUT"; tally "$OUT"
else fail=$((fail + 1)); fi
stop_server
# Keep-alive: a stream queued behind another request for longer than --http-timeout stays open.
if start_server "$DS_TEST_TMP/serve-http-f.log" --kv-cache-memory 256MiB --http-timeout 1 --max-num-seqs 1; then
    "$NODE" tests/server/keepalive.mjs "$BASE" | tee "$OUT"; tally "$OUT"
else fail=$((fail + 1)); fi
stop_server
# Graceful shutdown: SIGTERM with requests in flight, exit status 0, and a restart on the same
# port at once (SO_REUSEADDR; the drained server's connections linger in TIME_WAIT).
if start_server "$DS_TEST_TMP/serve-http-d.log" --kv-cache-memory 256MiB --shutdown-timeout 1; then
    "$NODE" tests/server/shutdown.mjs "$BASE" "$SERVER_PID" | tee "$OUT"; tally "$OUT"
    t0=$(date +%s.%N); wait "$SERVER_PID"; rc=$?; t1=$(date +%s.%N); SERVER_PID=""
    if [ "$rc" = 0 ] && grep -q 'drained (2 request' "$DS_TEST_TMP/serve-http-d.log"; then
        pass=$((pass + 1)); echo "ok SIGTERM exit status 0 after the drain ($(echo "$t1 - $t0" | bc) s after the client finished)"
    else
        fail=$((fail + 1)); echo "not ok SIGTERM exit status $rc; log:"; tail -5 "$DS_TEST_TMP/serve-http-d.log"
    fi
    if FIXED_PORT=$PORT start_server "$DS_TEST_TMP/serve-http-e.log" --kv-cache-memory 256MiB; then
        pass=$((pass + 1)); echo "ok restart binds port $PORT right after the shutdown"
        # A SIGTERM that lands on a thread other than main (the kernel may pick any thread that does
        # not block it) must still drain and exit: sent here to one HTTP/engine thread on purpose.
        tid=$(ls "/proc/$SERVER_PID/task" | grep -vx "$SERVER_PID" | head -1)
        python3 -c 'import ctypes, sys; sys.exit(ctypes.CDLL(None, use_errno=True).syscall(234, int(sys.argv[1]), int(sys.argv[2]), 15))' \
            "$SERVER_PID" "$tid"
        for _ in $(seq 1 100); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
        if kill -0 "$SERVER_PID" 2>/dev/null; then
            fail=$((fail + 1)); echo "not ok SIGTERM delivered to thread $tid: still running after 10 s"
        else
            wait "$SERVER_PID"; rc=$?; SERVER_PID=""
            if [ "$rc" = 0 ]; then pass=$((pass + 1)); echo "ok SIGTERM delivered to a non-main thread ($tid) drains and exits 0"
            else fail=$((fail + 1)); echo "not ok SIGTERM to thread $tid: exit status $rc"; fi
        fi
    else
        fail=$((fail + 1)); echo "not ok restart on port $PORT"
    fi
    stop_server
else fail=$((fail + 1)); fi
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
