#!/usr/bin/env bash
# Tokenizer encode throughput: dsflash beside the reference (HF tokenizers via npm, pinned in
# tests/tokenizer) on the same corpus in the same run.  Corpus: Moby Dick plus the 233 State of
# the Union addresses (~12 MB, one document per line), fetched by scripts/install-deps.sh.
# dsflash's figure is its encode time alone (`tokenize --lines --time`, one thread, cold word
# cache), the reference's is its own encode calls; both exclude process start and file loading.
set -u
cd "$(dirname "$0")/.."
BIN=${DSFLASH_BIN:-build/${BUILD:-release}/dsflash}
DATA=.cache/tokenizer-data
TOK=$DATA/deepseek_v3/tokenizer.json
if [ ! -f "$TOK" ] || [ ! -d tests/tokenizer/node_modules/tokenizers ]; then
    echo "tokenizer_bench: run scripts/install-deps.sh first"; exit 1
fi
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
/usr/bin/python3 - "$DATA" "$TMP/docs.jsonl" <<'PYEOF'
import json, os, sys
d = sys.argv[1]
files = [os.path.join(d, "moby_dick.txt")] + sorted(os.path.join(d, "sotu", f) for f in os.listdir(os.path.join(d, "sotu")))
with open(sys.argv[2], "w", encoding="utf-8") as out:
    for f in files:
        out.write(json.dumps(open(f, encoding="utf-8").read(), ensure_ascii=False) + "\n")
PYEOF
echo "== tokenizer encode throughput ($(wc -l <"$TMP/docs.jsonl") documents, $(du -h "$TMP/docs.jsonl" | cut -f1))"
for run in 1 2; do
    "$BIN" tokenize --tokenizer "$TOK" --lines "$TMP/docs.jsonl" --time 2>&1 >/dev/null | sed "s/^encode:/dsflash (run $run, 1 thread):/"
done
(cd tests/tokenizer && node bench_reference.js "../../$TOK" "$TMP/docs.jsonl")
