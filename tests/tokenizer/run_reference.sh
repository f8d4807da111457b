#!/usr/bin/env bash
# Byte-exact tokenizer comparison against Hugging Face tokenizers (npm tokenizers@0.23.2) on the
# DeepSeek tokenizer.json and on the V4.1-style tokenizers dsflash writes for the fixtures
# (129,280 ids "mini" layout and the 1,024-id cut-down "tiny" layout): edge cases, 3000 seeded
# random strings, Moby Dick whole, and every State of the Union address; plus three variants of the
# tiny tokenizer that exercise the normalizers, split behaviours and lstrip/rstrip tokens the
# DeepSeek file does not use (make_variants.py).  Prints one summary line
# "N passed, N failed" (each tokenizer x input group is one case).
set -u
cd "$(dirname "$0")/../.."
BIN=${DSFLASH_BIN:-$PWD/build/${BUILD:-release}/dsflash}
TMP=${DS_TEST_TMP:-$(mktemp -d)}/tokenizer-reference
BASE=.cache/tokenizer-data/deepseek_v3/tokenizer.json
pass=0; fail=0
note_fail() { echo "not ok $1"; fail=$((fail + 1)); }
if [ ! -f "$BASE" ] || [ ! -d tests/tokenizer/node_modules/tokenizers ] || ! command -v node >/dev/null; then
    note_fail "reference data or npm tokenizers missing: run scripts/install-deps.sh"
    echo "$pass passed, $fail failed"; exit 1
fi
rm -rf "$TMP"; mkdir -p "$TMP/deepseek_v3"
cp "$BASE" "$TMP/deepseek_v3/tokenizer.json"
if "$BIN" tokenize --write-release-tokenizer "$TMP/mini" --vocab-size 129280 --noise-id 128799 --image-id 129264 --base "$BASE" >/dev/null &&
   "$BIN" tokenize --write-release-tokenizer "$TMP/tiny" --vocab-size 1024 --noise-id 1001 --image-id 1010 --base "$BASE" >/dev/null; then
    echo "ok release tokenizers written"; pass=$((pass + 1))
else
    note_fail "writing the release tokenizers"
fi
run_groups() {   # tokenizer-dir groups...
    local dir=$1; shift
    [ -f "$TMP/$dir/tokenizer.json" ] || { note_fail "$dir: no tokenizer"; return; }
    local out; out=$(cd tests/tokenizer && node compare_reference.js "$BIN" "$TMP/$dir/tokenizer.json" "$TMP/scratch-$dir" "$@" 2>&1)
    echo "$out" | grep -v -E '^[0-9]+ passed, [0-9]+ failed$'
    local line; line=$(echo "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed$' | tail -1)
    if [ -z "$line" ]; then note_fail "$dir: comparison produced no result"; return; fi
    pass=$((pass + $(echo "$line" | cut -d' ' -f1))); fail=$((fail + $(echo "$line" | cut -d' ' -f3)))
}
run_groups deepseek_v3 edge fuzz moby sotu
run_groups mini edge fuzz moby
run_groups tiny edge fuzz moby
if [ -f "$TMP/tiny/tokenizer.json" ] && /usr/bin/python3 tests/tokenizer/make_variants.py "$TMP/tiny/tokenizer.json" "$TMP"; then
    for v in nfkc_digits nfd_removed contiguous_icase; do LOSSY=1 run_groups "$v" edge fuzz moby; done
else
    note_fail "writing the tokenizer variants"
fi
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
