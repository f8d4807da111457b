#!/usr/bin/env bash
# The gates on the quantized trained fixture (tests/data/trained-tiny), for what they are worth: a
# tiny model trained briefly cannot pass accuracy gates, so this script reports, it does not
# judge (not a run_*.sh suite).  Prints each tool's verdict line; results in $OUT (default a temp dir).
# usage: bash tests/tools13b/trained_gates.sh [OUT_DIR]
set -u
cd "$(dirname "$0")/../.."
. tests/server/serve_lib.sh
OUT=${1:-$(mktemp -d)}; mkdir -p "$OUT"
B=$DSFLASH_BIN
SRC=$OUT/tt_float; mkdir -p "$SRC"
cp tests/data/trained-tiny/config.json tests/data/trained-tiny/tokenizer_config.json "$SRC/"
for f in model.safetensors tokenizer.json engram_token_map.u32; do gunzip -c "tests/data/trained-tiny/$f.gz" >"$SRC/$f"; done
[ -d "$OUT/tt_w4a8" ] || "$B" quantize --src "$SRC" --dst "$OUT/tt_w4a8" --quiet >"$OUT/quantize.log" 2>&1 || { echo "quantize failed"; exit 1; }
start_server "$OUT/serve.log" --model "$OUT/tt_w4a8" --kv-cache-memory 256MiB || exit 1
D=tests/data/gsm8k_arith
run() { local name=$1; shift; "$B" "$@" >"$OUT/$name.out" 2>&1; echo "[$name exit $?] $(grep -E '^(dose|arm|probe|extended|part|gsm8k:|needle:|agent-gate:|multibatch-gate:|determinism:|kv-walk:)' "$OUT/$name.out" | tr '\n' ';')"; }
run gsm8k gsm8k --base-url "$BASE" --data $D/test.jsonl --shots-file $D/train.jsonl --limit 40 --shots 8 --max-tokens 64 --json-out "$OUT/gsm8k.json" --items-out "$OUT/gsm8k.jsonl"
run needle needle --base-url "$BASE" --doses 1000 --reps 4 --json-out "$OUT/needle.json"
run agent agent-gate --base-url "$BASE" --arms 300,1000 --reps 4 --max-tokens 256 --json-out "$OUT/agent.json"
printf 'The quick brown fox' >"$OUT/prompt.txt"
run determinism determinism --base-url "$BASE" --prompt-file "$OUT/prompt.txt" --n 8 --gen-tokens 64 --concurrent --background 2 --json-out "$OUT/det.json"
run multibatch multibatch-gate --base-url "$BASE" --long-tokens 1500 --json-out "$OUT/multibatch.json"
run kvwalk kv-walk --base-url "$BASE" --tokens 4000 --runs 4 --occupy-tokens 1000 --json-out "$OUT/kvwalk.json"
stop_server
