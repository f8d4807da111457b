#!/usr/bin/env bash
# The checkpoint tools' command lines (reassemble, verify, mkmodel, quantize, eval) on the flag table:
# bad values and bad combinations exit 2 with a message naming the flag, the value and the limit,
# before any work (no output directory appears); --help lists exactly the flags the parser takes
# (every flag named in the usage synopsis is a row, and every row answers as a known flag).  Only
# argument handling runs, so the suite takes about a second.
set -u
cd "$(dirname "$0")/../.."
. tests/tools/lib.sh
T=$DS_TEST_TMP/tools13-cli-flags
rm -rf "$T"; mkdir -p "$T"

# refused "description" "expected stderr text" dsflash-args...: exit 2, the text, no $T/out
refused() {
    local d=$1 want=$2; shift 2
    rm -rf "$T/out"
    "$B" "$@" >"$T/o.log" 2>"$T/e.log"
    local rc=$?
    if [ "$rc" = 2 ] && grep -qF -- "$want" "$T/e.log" && [ ! -e "$T/out" ]; then ok "$d"
    else bad "$d" "exit $rc (want 2), want '$want' in stderr, out exists: $([ -e "$T/out" ] && echo yes || echo no); stderr: $(head -3 "$T/e.log")"; fi
}

O=$T/out
echo "--- reassemble"
refused "reassemble --jobs 0" "dsflash reassemble: --jobs: expected an integer in [1, 16], got '0'" reassemble "$T" --check-only --jobs 0
refused "reassemble --jobs 17" "got '17'" reassemble "$T" --check-only --jobs 17
refused "reassemble --jobs without --check-only" "--jobs: applies to --check-only only" reassemble "$T" --jobs 4
refused "reassemble two directories" "two directories given ('$T' and '$O')" reassemble "$T" --dir "$O"
refused "reassemble --check-only --delete-parts" "cannot be combined with --delete-parts" reassemble "$T" --check-only --delete-parts
refused "reassemble switch with a value" "--replace takes no value, got 'yes'" reassemble "$T" --replace=yes
refused "reassemble abbreviated option" "--target-name: unknown option" reassemble "$T" --target-name x
refused "reassemble --target without a value" "--target needs a value" reassemble "$T" --target
echo "--- verify"
refused "verify --samples 0" "dsflash verify: --samples: expected an integer in [1, 1000000], got '0'" verify "$T" --deep --samples 0
refused "verify --samples 1000001" "got '1000001'" verify "$T" --deep --samples 1000001
refused "verify --samples x" "got 'x'" verify "$T" --deep --samples x
refused "verify --samples without --deep" "--samples: applies to --deep only" verify "$T" --samples 5
refused "verify --profile v4" "--profile: expected auto, v41-flash-w4a8 or none, got 'v4'" verify "$T" --profile v4
refused "verify two directories" "unexpected argument '$O' (at most 1 DIR)" verify "$T" "$O"
refused "verify without DIR" "DIR is required" verify --deep
echo "--- mkmodel"
refused "mkmodel --seed -1" "--seed: expected an integer in [0, 9223372036854775807], got '-1'" mkmodel --config tiny --out "$O" --seed -1
refused "mkmodel --seed 2^63" "got '9223372036854775808'" mkmodel --config tiny --out "$O" --seed 9223372036854775808
refused "mkmodel --threads 0" "--threads: expected an integer in [1, 4096], got '0'" mkmodel --config tiny --out "$O" --threads 0
refused "mkmodel --shard-size 0" "--shard-size: expected a size of at least 1 byte" mkmodel --config tiny --out "$O" --shard-size 0
refused "mkmodel --split-engram 1.5M" "--split-engram: expected a size of at least 1 byte (suffixes K, M, G, T, KiB.., KB..), got '1.5M'" mkmodel --config tiny --out "$O" --split-engram 1.5M
refused "mkmodel --rotation half" "--rotation: expected random or identity, got 'half'" mkmodel --config tiny --out "$O" --rotation half
refused "mkmodel --format gguf" "--format: expected w4a8 or official, got 'gguf'" mkmodel --config tiny --out "$O" --format gguf
refused "mkmodel without --config" "--config: is required" mkmodel --out "$O"
refused "mkmodel without --out" "--out: is required" mkmodel --config tiny
refused "mkmodel --no-split --split-engram" "--no-split: excludes --split-engram" mkmodel --config tiny --out "$O" --no-split --split-engram 64KiB
refused "mkmodel --no-verify without a release" "--no-verify: applies to the W4A8 release only" mkmodel --config tiny --float-out "$O" --no-verify
refused "mkmodel official --split-engram" "--split-engram: not accepted with --format official" mkmodel --config tiny --out "$O" --format official --split-engram 64KiB
refused "mkmodel official --rotation" "with --format official" mkmodel --config tiny --out "$O" --format official --rotation identity
refused "mkmodel --sed (misspelt)" "--sed: unknown option" mkmodel --config tiny --out "$O" --sed 3
echo "--- quantize"
refused "quantize --ssz-steps 0" "--ssz-steps: expected an integer in [1, 20], got '0'" quantize --src "$T" --dst "$O" --ssz-steps 0
refused "quantize --ssz-steps 21" "got '21'" quantize --src "$T" --dst "$O" --ssz-steps 21
refused "quantize --ssz-steps with minmax" "--ssz-steps: applies to --int4-search ssz only" quantize --src "$T" --dst "$O" --int4-search minmax --ssz-steps 4
refused "quantize --threads 4097" "--threads: expected an integer in [1, 4096], got '4097'" quantize --src "$T" --dst "$O" --threads 4097
refused "quantize --shard-size 4X" "--shard-size: expected a size of at least 1 byte" quantize --src "$T" --dst "$O" --shard-size 4X
refused "quantize --src-format fp16" "--src-format: expected bf16 or fp8, got 'fp16'" quantize --src "$T" --dst "$O" --src-format fp16
refused "quantize --plan fast" "--plan: expected default or aggressive, got 'fast'" quantize --src "$T" --dst "$O" --plan fast
refused "quantize --in and --src disagree" "given twice with different values" quantize --in "$T" --src "$T/x" --dst "$O"
refused "quantize --split-only without --split-engram" "--split-only: needs --split-engram SIZE" quantize --src "$T" --dst "$O" --split-only
refused "quantize --engram-only --no-engram" "--engram-only: excludes --no-engram" quantize --src "$T" --dst "$O" --engram-only --no-engram
refused "quantize without --dst" "--dst: is required" quantize --src "$T"
echo "--- eval"
refused "eval perplexity --steps" "dsflash eval perplexity: --steps: applies to eval acceptance only" eval perplexity --model "$T" --tokens "$T/t" --steps 3
refused "eval acceptance --window" "--window: applies to eval perplexity only" eval acceptance --model "$T" --tokens "$T/t" --window 64
refused "eval --window 1" "--window: expected an integer in [2, 1048576], got '1'" eval perplexity --model "$T" --tokens "$T/t" --window 1
refused "eval --num-speculative-tokens 9" "--num-speculative-tokens: expected an integer in [1, 8], got '9'" eval acceptance --model "$T" --tokens "$T/t" --num-speculative-tokens 9
refused "eval --starts 48,x" "--starts: 'x' at offset 3" eval acceptance --model "$T" --tokens "$T/t" --starts 48,x
refused "eval --starts 0" "--starts: '0' at offset 0: expected a prompt length in tokens in [1, 2147483647]" eval acceptance --model "$T" --tokens "$T/t" --starts 0
refused "eval --trace with two starts" "--trace: records one greedy run; expected one --starts value, got 2" eval acceptance --model "$T" --tokens "$T/t" --starts 48,96 --trace "$O"
refused "eval --numerics fp16" "--numerics: expected exact or fast, got 'fp16'" eval perplexity --model "$T" --tokens "$T/t" --numerics fp16
refused "eval without a mode" "expected the mode perplexity or acceptance, got 'ppl'" eval ppl --model "$T"
refused "eval without --tokens" "--tokens: is required" eval perplexity --model "$T"

echo "--- needle"
refused "needle --doses 8k,x" "dsflash needle: --doses: 'x' at offset 3: expected a dose in tokens (k = 1000) in [1, 100000000]" needle --base-url http://127.0.0.1:9 --doses 8k,x
refused "needle --doses 0" "--doses: '0' at offset 0" needle --base-url http://127.0.0.1:9 --doses 0
refused "needle --doses ,," "--doses: empty item at offset 0" needle --base-url http://127.0.0.1:9 --doses ,,
refused "needle --doses 33 items" "too many items" needle --base-url http://127.0.0.1:9 --doses 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33

echo "--- --help is the parser's table"
for cmd in reassemble verify mkmodel quantize; do
    "$B" $cmd --help >"$T/h.txt" 2>&1; rc=$?
    rows=$(grep -oE '^  --[a-z0-9-]+' "$T/h.txt" | tr -d ' ' | sort -u)
    synopsis=$(sed -n '/^flags (/q;p' "$T/h.txt" | grep -oE -- '--[a-z0-9-]+' | sort -u)
    missing=$(comm -23 <(echo "$synopsis") <(echo "$rows") | tr '\n' ' ')
    unknown=""
    for f in $rows; do
        "$B" $cmd "$f=" >"$T/o.log" 2>"$T/e.log"   # an empty or unwanted value: refused, but as a known flag
        if grep -q "unknown option" "$T/e.log" || ! grep -qF -- "$f" "$T/e.log"; then unknown+="$f "; fi
    done
    if [ "$rc" = 0 ] && [ -n "$rows" ] && [ -z "$missing" ] && [ -z "$unknown" ]; then
        ok "$cmd --help: $(echo $rows | wc -w) rows, every synopsis flag is a row, every row is parsed"
    else bad "$cmd --help (exit $rc)" "synopsis flags without a row: '$missing'; rows the parser does not know: '$unknown'"; fi
done
rm -rf "$T"
finish
