#!/usr/bin/env bash
# `make bench`: the kernel table against this host's limits, then the serving table of the mini
# checkpoint (`dsflash perf serve`: single-stream and batched decode against their rooflines,
# TTFT of a 2,048-token prompt, prefill against the int8 peak, both numerics tiers), then
# llama.cpp beside it on a GGUF of equal bytes per token.  Every figure is a ratio to limits
# measured in the same run with the same thread count (a concurrent job on the host changes both).
#
# Environment: BUILD (release), DSFLASH_BIN (build/$BUILD/dsflash), DS_BENCH_THREADS (all CPUs), DS_BENCH_MINI (checkpoint folder,
# default models/mini, git-ignored; built once with `dsflash mkmodel --config mini`, ~6.7 GiB),
# DS_BENCH_NUMERICS (both), DS_BENCH_QUICK (1: bench serve --quick), DS_BENCH_LLAMACPP (0: skip
# llama.cpp, reported as skipped), DS_BENCH_HTTP (0: skip the HTTP sweep).  `perf decode --model DIR`
# stays available on its own.  Last, the HTTP concurrency sweep of `dsflash bench` against
# `dsflash serve` of the mini checkpoint (bench/serve_bench.sh), whose JSON, SVG and CSV go to
# docs/bench/ (the published performance picture), then `dsflash needle` (8K-32K) and
# `dsflash kv-walk` (32K) against the same server, their JSON beside it (docs/bench/README.md).
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-release}
BIN=${DSFLASH_BIN:-build/$BUILD/dsflash}
THREADS=${DS_BENCH_THREADS:-$(nproc)}
MINI=${DS_BENCH_MINI:-models/mini}
NUMERICS=${DS_BENCH_NUMERICS:-both}
OUT=build/bench
rc=0
mkdir -p "$OUT"

echo "== dsflash perf kernels (threads $THREADS)"
"$BIN" perf kernels --threads "$THREADS" || rc=1

echo
echo "== dsflash perf serve (mini checkpoint $MINI, threads $THREADS, numerics $NUMERICS)"
if [ ! -f "$MINI/config.json" ]; then
    echo "building the mini checkpoint in $MINI (once)"
    mkdir -p "$(dirname "$MINI")"
    if ! "$BIN" mkmodel --config mini --out "$MINI" --threads "$THREADS" --quiet; then
        echo "bench: mkmodel --config mini failed; serving benchmark not run"
        exit 1
    fi
fi
quick=()
[ "${DS_BENCH_QUICK:-0}" = 1 ] && quick=(--quick)
rm -f "$OUT/serve.json"
if ! "$BIN" perf serve --model "$MINI" --threads "$THREADS" --numerics "$NUMERICS" "${quick[@]}" \
        --json "$OUT/serve.json"; then
    echo "bench: perf serve failed; llama.cpp comparison not run"
    exit 1
fi

echo
echo "== llama.cpp beside dsflash (threads $THREADS)"
if [ "${DS_BENCH_LLAMACPP:-1}" = 0 ]; then
    echo "llama.cpp: skipped (DS_BENCH_LLAMACPP=0)"
else
    bench/llamacpp_bench.sh --ours "$OUT/serve.json" --model "$MINI" --threads "$THREADS" || rc=1
fi

echo
echo "== dsflash bench: HTTP concurrency sweep against dsflash serve (mini checkpoint $MINI)"
if [ "${DS_BENCH_HTTP:-1}" = 0 ]; then
    echo "bench: HTTP sweep skipped (DS_BENCH_HTTP=0)"
else
    DSFLASH_BIN=$BIN SERVE_FLAGS="--threads $THREADS" bench/serve_bench.sh "$MINI" --label mini-production || rc=1
fi
exit $rc
