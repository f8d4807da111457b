#!/usr/bin/env bash
# Runs each libFuzzer target (build/fuzz/fuzz_<name>, `make fuzz-build`) for FUZZ_SECONDS and prints
# one row per target: executions, executions per second, corpus size, crashes.
#
# Why it is built this way: libFuzzer stops at its first crash and writes the input to
# build/fuzz/crashes/<name>/; the row names that file so it can be minimized and copied into
# fuzz/regress/<name>/ (replayed by `make test` from then on) once the parser is fixed.  New
# interesting inputs go to build/fuzz/corpus/<name>/ (kept between runs, not committed); the
# committed seeds in fuzz/corpus/<name>/ are only read.  Exit status 1 if any target crashed or
# could not run, so CI fails on a finding.
set -u
cd "$(dirname "$0")/.."
SECS=${FUZZ_SECONDS:-60}
[ $# -gt 0 ] || set -- $(ls fuzz/fuzz_*.c | sed 's|fuzz/fuzz_\(.*\)\.c|\1|')
# inputs stay small so each target runs thousands of times even on a busy 2-core host (a longer
# seed, such as the 21 KB tiny tokenizer, is read truncated: it still seeds the structure)
max_len() { case $1 in http|safetensors) echo 16384 ;; *) echo 8192 ;; esac; }
status=0
rows=()
for t in "$@"; do
    bin=build/fuzz/fuzz_$t
    work=build/fuzz/corpus/$t; crashes=build/fuzz/crashes/$t; log=build/fuzz/$t.log
    mkdir -p "$work" "$crashes"
    if [ ! -x "$bin" ]; then rows+=("$(printf '%-14s %12s %9s %8s  %s' "$t" - - - "not built (make fuzz-build)")"); status=1; continue; fi
    echo "fuzz: $t for ${SECS}s"
    # the harness's scratch (fuzz_tmpdir) lives under a folder removed here: libFuzzer's exit on a
    # finding or a timeout skips the harness's own atexit clean-up
    scratch=build/fuzz/tmp.$t; rm -rf "$scratch"; mkdir -p "$scratch"
    TMPDIR=$PWD/$scratch "$bin" -max_total_time="$SECS" -timeout=10 -rss_limit_mb=2048 -max_len="$(max_len "$t")" \
        -print_final_stats=1 -artifact_prefix="$crashes/" "$work" "fuzz/corpus/$t" >"$log" 2>&1
    rc=$?
    rm -rf "$scratch"
    execs=$(grep -E -o 'stat::number_of_executed_units:[[:space:]]*[0-9]+' "$log" | tail -1 | grep -E -o '[0-9]+$')
    rate=$(grep -E -o 'stat::average_exec_per_sec:[[:space:]]*[0-9]+' "$log" | tail -1 | grep -E -o '[0-9]+$')
    units=$(ls "$work" | wc -l)
    found=$(grep -o "Test unit written to [^ ]*" "$log" | sed 's/Test unit written to //' | tr '\n' ' ')
    if [ "$rc" = 0 ] && [ -n "$execs" ]; then
        rows+=("$(printf '%-14s %12s %9s %8s  %s' "$t" "$execs" "$rate" "$units" 0)")
    else
        status=1
        why=$(grep -m1 -E 'ERROR: (AddressSanitizer|UndefinedBehaviorSanitizer|libFuzzer)|runtime error|==ERROR' "$log" | cut -c1-120)
        rows+=("$(printf '%-14s %12s %9s %8s  %s' "$t" "${execs:-?}" "${rate:-?}" "$units" "1 (exit $rc): ${found:-no artifact} ${why}")")
        tail -40 "$log" | sed 's/^/    /'
    fi
done
echo
printf '%-14s %12s %9s %8s  %s\n' target executions exec/s corpus crashes
for r in "${rows[@]}"; do echo "$r"; done
exit $status
