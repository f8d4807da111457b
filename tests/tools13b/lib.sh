# Shared by the tests/tools13b suites: pass/fail counting, a JSON field reader (python3, not our
# code), and the scripted stub server (stub_server.py) started on a free port and stopped by pid.
pass=0; fail=0
PY=${PY:-python3}
ok() { echo "ok $*"; pass=$((pass + 1)); }
bad() { echo "FAIL $*"; fail=$((fail + 1)); }
# expect NAME WANT_RC GOT_RC
expect_rc() { if [ "$2" = "$3" ]; then ok "$1 (exit $3)"; else bad "$1: exit $3, expected $2"; fi; }
# jcheck NAME FILE PYTHON_EXPR (j is the parsed file): passes when the expression is true
jcheck() {
    local name=$1 file=$2 expr=$3
    if [ ! -s "$file" ]; then bad "$name: $file missing"; return; fi
    if "$PY" -c "import json,sys; j=json.load(open(sys.argv[1])); v=($expr); sys.exit(0 if v and not isinstance(v, tuple) else 1)" "$file"; then ok "$name"
    else bad "$name: not ($expr) in $file"; "$PY" -c "import json,sys; j=json.load(open(sys.argv[1])); print(json.dumps({k:v for k,v in j.items() if k!='server'})[:1500])" "$file"; fi
}
STUB_PID=""
start_stub() {   # start_stub MODE [TABLE]: sets STUB
    local pf; pf=$(mktemp -u "$DS_TEST_TMP/stubport.XXXX")
    "$PY" tests/tools13b/stub_server.py "$pf" "$@" >"$pf.log" 2>&1 &
    STUB_PID=$!
    for _ in $(seq 1 100); do [ -s "$pf" ] && break; sleep 0.1; done
    STUB="http://127.0.0.1:$(cat "$pf" 2>/dev/null)"
}
stop_stub() {
    if [ -n "$STUB_PID" ]; then kill "$STUB_PID" 2>/dev/null; wait "$STUB_PID" 2>/dev/null; fi
    STUB_PID=""
}
