#!/usr/bin/env bash
# Replays every fuzz seed (fuzz/corpus/<target>/) and every input that once crashed a target
# (fuzz/regress/<target>/) through that target, built by the project's compiler
# (build/$BUILD/fuzz/replay_<target>; under BUILD=asan with ASan+UBSan).  So `make test` keeps the
# fixed crashes fixed without clang.  One case per target; a target without its replay binary or
# without any input fails.  Prints "N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-release}
pass=0; fail=0
targets=$(ls fuzz/fuzz_*.c 2>/dev/null | sed 's|fuzz/fuzz_\(.*\)\.c|\1|')
[ -n "$targets" ] || { echo "not ok no fuzz targets found under fuzz/"; echo "0 passed, 1 failed"; exit 1; }
log=$(mktemp)
for t in $targets; do
    bin=build/$BUILD/fuzz/replay_$t
    dirs=()
    for d in fuzz/corpus/$t fuzz/regress/$t; do [ -d "$d" ] && dirs+=("$d"); done
    if [ ! -x "$bin" ]; then echo "not ok $t: $bin not built (make BUILD=$BUILD)"; fail=$((fail + 1)); continue; fi
    if [ ${#dirs[@]} = 0 ]; then echo "not ok $t: no seed corpus (fuzz/corpus/$t)"; fail=$((fail + 1)); continue; fi
    timeout 600 "$bin" "${dirs[@]}" >"$log" 2>&1   # a hang (a former fuzz timeout) fails, never stalls the run
    rc=$?
    line=$(grep -E '^[0-9]+ passed, 0 failed$' "$log" | tail -1)
    if [ "$rc" = 0 ] && [ -n "$line" ] && [ "${line%% *}" -gt 0 ]; then
        echo "ok $t: ${line%% *} inputs replayed (${dirs[*]})"; pass=$((pass + 1))
    else
        echo "not ok $t: exit $rc"; tail -25 "$log" | sed 's/^/    /'; fail=$((fail + 1))
    fi
done
rm -f "$log"
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
