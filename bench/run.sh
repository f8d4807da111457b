#!/usr/bin/env bash
# `make bench`: the kernel table against this host's limits, then single-stream decode of the
# mini checkpoint against its weight-bytes roofline.  Every figure is a ratio to limits measured
# in the same run with the same thread count (a concurrent job on the host changes both).
#
# Environment: BUILD (release), DS_BENCH_THREADS (all CPUs), DS_BENCH_MINI (checkpoint folder,
# default build/bench/mini; built once with `dsflash mkmodel --config mini`, ~6.7 GiB),
# DS_BENCH_TOKENS (decode tokens, 32), DS_BENCH_PROMPT (prompt tokens, 64).
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-release}
BIN=build/$BUILD/dsflash
THREADS=${DS_BENCH_THREADS:-$(nproc)}
MINI=${DS_BENCH_MINI:-build/bench/mini}
TOKENS=${DS_BENCH_TOKENS:-32}
PROMPT=${DS_BENCH_PROMPT:-64}
rc=0

echo "== dsflash bench kernels (threads $THREADS)"
"$BIN" bench kernels --threads "$THREADS" || rc=1

echo
echo "== dsflash bench decode (mini checkpoint, threads $THREADS)"
if [ ! -f "$MINI/config.json" ]; then
    echo "building the mini checkpoint in $MINI (once)"
    mkdir -p "$(dirname "$MINI")"
    if ! "$BIN" mkmodel --config mini --out "$MINI" --threads "$THREADS" --quiet; then
        echo "bench: mkmodel --config mini failed; decode benchmark not run"
        exit 1
    fi
fi
"$BIN" bench decode --model "$MINI" --threads "$THREADS" --tokens "$TOKENS" --prompt-tokens "$PROMPT" || rc=1
exit $rc
