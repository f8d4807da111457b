# Shared by the tests/server suites: start `dsflash serve` on a free loopback port, wait for
# READY (/health 200), and stop exactly the process we started (by recorded pid, never by name).
# The model is the default one: with no --model the server generates the tiny checkpoint once into
# --model-cache ($DS_TEST_TMP/models, shared by the suites of one run), which is the README's path.
# Usage: start_server LOGFILE [serve flags...]; sets BASE, PORT and SERVER_PID (FIXED_PORT=N reuses
# a port, for restart tests).  stop_server.

DSFLASH_BIN=${DSFLASH_BIN:-$PWD/build/${BUILD:-release}/dsflash}
DS_TEST_TMP=${DS_TEST_TMP:-$(mktemp -d)}
MODEL_CACHE=$DS_TEST_TMP/models
SERVER_PID=""
NODE=${NODE:-node}

free_port() {
    "$NODE" -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close();});'
}

start_server() {
    local log=$1; shift
    local port; port=${FIXED_PORT:-$(free_port)}
    PORT=$port
    BASE="http://127.0.0.1:$port"
    mkdir -p "$MODEL_CACHE"
    "$DSFLASH_BIN" serve --model-cache "$MODEL_CACHE" --host 127.0.0.1 --port "$port" --self-check quick "$@" >"$log" 2>&1 &
    SERVER_PID=$!
    local limit=300; [ "${BUILD:-release}" = asan ] && limit=900
    local t=0
    while [ $t -lt $((limit * 5)) ]; do
        if ! kill -0 "$SERVER_PID" 2>/dev/null; then
            echo "server exited during start-up; log:" >&2; tail -30 "$log" >&2; SERVER_PID=""; return 1
        fi
        if grep -q '^READY ' "$log" 2>/dev/null; then return 0; fi
        sleep 0.2; t=$((t + 1))
    done
    echo "server not READY after ${limit}s; log:" >&2; tail -30 "$log" >&2
    stop_server
    return 1
}

stop_server() {
    if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
        kill -TERM "$SERVER_PID" 2>/dev/null
        for _ in $(seq 1 100); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
        kill -0 "$SERVER_PID" 2>/dev/null && kill -KILL "$SERVER_PID" 2>/dev/null
        wait "$SERVER_PID" 2>/dev/null
    fi
    SERVER_PID=""
}
trap stop_server EXIT
