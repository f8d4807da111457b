#!/usr/bin/env bash
# dsflash engram-map against an independent Python implementation of MODEL.md §2.10.1
# (engram_map_oracle.py, Python's own unicodedata tables) on the DeepSeek V3 tokenizer and on the
# V4.1-style mini/tiny tokenizers; the mini one must give the spec's 99092 classes; --check accepts
# the written map and rejects a corrupted one.  Prints "N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
BIN=${DSFLASH_BIN:-$PWD/build/${BUILD:-release}/dsflash}
TMP=${DS_TEST_TMP:-$(mktemp -d)}/tokenizer-engram
BASE=.cache/tokenizer-data/deepseek_v3/tokenizer.json
PY=/usr/bin/python3
pass=0; fail=0
ok() { echo "ok $1"; pass=$((pass + 1)); }
no() { echo "not ok $1"; fail=$((fail + 1)); }
if [ ! -f "$BASE" ]; then no "base tokenizer missing: run scripts/install-deps.sh"; echo "$pass passed, $fail failed"; exit 1; fi
rm -rf "$TMP"; mkdir -p "$TMP"
"$BIN" tokenize --write-release-tokenizer "$TMP/mini" --vocab-size 129280 --noise-id 128799 --image-id 129264 --base "$BASE" >/dev/null || no "write mini"
"$BIN" tokenize --write-release-tokenizer "$TMP/tiny" --vocab-size 1024 --noise-id 1001 --image-id 1010 --base "$BASE" >/dev/null || no "write tiny"
for t in "$BASE" "$TMP/mini/tokenizer.json" "$TMP/tiny/tokenizer.json"; do
    name=$(basename "$(dirname "$t")")
    if "$BIN" engram-map --tokenizer "$t" --out "$TMP/$name.map" >"$TMP/$name.log" 2>&1; then
        res=$("$PY" tests/tokenizer/engram_map_oracle.py "$t" "$TMP/$name.map")
        if [ $? = 0 ]; then ok "$name: map equals the Python oracle ($res)"; else no "$name: $res"; fi
    else
        no "$name: engram-map failed: $(cat "$TMP/$name.log")"
    fi
done
if "$BIN" engram-map --tokenizer "$TMP/mini/tokenizer.json" --out "$TMP/mini2.map" --expect-classes 99092 >/dev/null; then
    ok "mini: 99092 classes (engram_compressed_vocab_size)"; else no "mini: class count is not 99092"; fi
"$BIN" engram-map --tokenizer "$TMP/mini/tokenizer.json" --out "$TMP/x.map" --expect-classes 99000 >/dev/null 2>&1
[ $? = 1 ] && ok "wrong --expect-classes exits 1" || no "wrong --expect-classes must exit 1"
"$BIN" engram-map --model "$TMP/mini" --check "$TMP/mini.map" >/dev/null && ok "--check accepts the written map" || no "--check rejected the written map"
cp "$TMP/mini.map" "$TMP/bad.map"
printf '\x05\x00\x00\x00' | dd of="$TMP/bad.map" bs=1 seek=40000 conv=notrunc status=none
"$BIN" engram-map --model "$TMP/mini" --check "$TMP/bad.map" >/dev/null 2>"$TMP/bad.log"
rc=$?
[ $rc = 1 ] && grep -q "bad.map: \(token\|entry\) 1000[01]" "$TMP/bad.log" && ok "--check rejects a corrupted map, naming the entry" || no "--check on a corrupted map: rc=$rc $(cat "$TMP/bad.log")"
"$BIN" engram-map --tokenizer "$TMP/none.json" --out "$TMP/y.map" >/dev/null 2>&1
[ $? = 5 ] && ok "missing tokenizer exits 5" || no "missing tokenizer must exit 5"
"$BIN" engram-map --tokenizer "$BASE" >/dev/null 2>&1
[ $? = 2 ] && ok "no --out/--check exits 2" || no "usage error must exit 2"
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
