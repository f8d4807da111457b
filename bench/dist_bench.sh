#!/usr/bin/env bash
# Shared-memory figures of tensor/expert parallelism (docs/DISTRIBUTED.md): R = 2 ranks x 1 thread
# against R = 1 x 2 threads on the same cores, prefill and decode tok/s, and the share of step time
# rank 0 spends inside collectives.  Also checks that both runs generate the same ids.
# usage: bench/dist_bench.sh MODEL_DIR [PROMPT_TOKENS] [DECODE_TOKENS]
set -u
M=${1:?model directory}; P=${2:-256}; G=${3:-33}
BIN=${DSFLASH_BIN:-$(dirname "$0")/../build/release/dsflash}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
IDS=$(seq -s, 1000 7 $((1000 + 7 * (P - 1))))
ARGS="--model $M --prompt-ids $IDS --max-tokens $G --ignore-eos"
TMP=$(mktemp -d)
"$BIN" generate $ARGS --threads 2 --max-tokens 2 > /dev/null 2>&1   # warm the page cache
for mode in ordered fast; do
    "$BIN" generate $ARGS --threads 2 > "$TMP/r1.log" 2>&1
    mpirun --oversubscribe --bind-to none -np 2 "$BIN" generate $ARGS --threads 1 --tensor-parallel-size 2 \
        --reduce-mode $mode > "$TMP/r2.log" 2> "$TMP/r2.err"
    for f in r1 r2; do
        pre=$(sed -n 's/^prefill: .*(\([0-9.]*\) tok\/s.*/\1/p' "$TMP/$f.log"); dec=$(sed -n 's/^decode: .*(\([0-9.]*\) tok\/s.*/\1/p' "$TMP/$f.log")
        echo "$f $mode prefill_tok_s=$pre decode_tok_s=$dec"
    done
    grep '^comm:' "$TMP/r2.log"
    grep 'resident' "$TMP/r2.err"
    cmp -s <(grep '^generated:' "$TMP/r1.log") <(grep '^generated:' "$TMP/r2.log") && echo "ids: identical ($mode)" || echo "ids: DIFFER ($mode)"
done
rm -rf "$TMP"
