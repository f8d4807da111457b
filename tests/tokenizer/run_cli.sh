#!/usr/bin/env bash
# dsflash tokenize / detokenize from the command line: chat rendering through --chat matches the
# golden prompt and its ids, streaming detokenization concatenates to the plain decode, batch and
# stdin modes, and the exit statuses of TOOLS.md §0 (2 usage incl. abbreviations, 5 missing input,
# 1 bad content).  Prints "N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
BIN=${DSFLASH_BIN:-$PWD/build/${BUILD:-release}/dsflash}
TMP=${DS_TEST_TMP:-$(mktemp -d)}/tokenizer-cli
BASE=.cache/tokenizer-data/deepseek_v3/tokenizer.json
GOLDEN=tests/data/encoding_golden.jsonl
PY=/usr/bin/python3
pass=0; fail=0
ok() { echo "ok $1"; pass=$((pass + 1)); }
no() { echo "not ok $1"; fail=$((fail + 1)); }
expect_rc() {  # want name cmd...
    local want=$1 name=$2; shift 2
    "$@" >"$TMP/out" 2>"$TMP/err"
    local rc=$?
    if [ "$rc" = "$want" ]; then ok "$name (exit $rc)"; else no "$name: exit $rc, want $want: $(head -c 300 "$TMP/err")"; fi
}
if [ ! -f "$BASE" ] || [ ! -f "$GOLDEN" ]; then no "inputs missing (scripts/install-deps.sh, tests/data)"; echo "$pass passed, $fail failed"; exit 1; fi
rm -rf "$TMP"; mkdir -p "$TMP"
"$BIN" tokenize --write-release-tokenizer "$TMP/v41" --vocab-size 129280 --noise-id 128799 --image-id 129264 --base "$BASE" >/dev/null || no "write tokenizer"
T="$TMP/v41/tokenizer.json"

# --chat: the agent-loop golden (tools, thinking, tool results), rendered and tokenized
"$PY" - "$GOLDEN" "$TMP" <<'PYEOF'
import json, sys
for l in open(sys.argv[1], encoding="utf-8"):
    d = json.loads(l)
    if d["name"].startswith("agent_loop"):
        o = d["options"]
        req = {"messages": d["messages"], "tools": d["tools"], "reasoning_effort": o["reasoning_effort"]}
        open(sys.argv[2] + "/req.json", "w", encoding="utf-8").write(json.dumps(req, ensure_ascii=False))
        open(sys.argv[2] + "/prompt.txt", "w", encoding="utf-8").write(d["prompt"])
PYEOF
"$BIN" tokenize --model "$TMP/v41" --chat "$TMP/req.json" --print-prompt >"$TMP/got.txt"
cmp -s "$TMP/got.txt" "$TMP/prompt.txt" && ok "--chat --print-prompt equals the golden prompt" || no "--chat prompt differs from the golden"
"$BIN" tokenize --tokenizer "$T" --chat "$TMP/req.json" >"$TMP/chat.ids"
"$BIN" tokenize --tokenizer "$T" --file "$TMP/prompt.txt" >"$TMP/text.ids"
cmp -s "$TMP/chat.ids" "$TMP/text.ids" && ok "--chat ids equal the ids of the golden prompt text" || no "--chat ids differ"
"$BIN" detokenize --tokenizer "$T" --file "$TMP/chat.ids" >"$TMP/back.txt"
cmp -s "$TMP/back.txt" "$TMP/prompt.txt" && ok "detokenize of the chat ids gives the prompt back" || no "detokenize round trip"
n=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['count'])" <("$BIN" tokenize --tokenizer "$T" --chat "$TMP/req.json" --json))
[ "$n" = "$(wc -w <"$TMP/chat.ids")" ] && ok "--json count ($n)" || no "--json count $n"
echo '{"messages":[{"role":"user","content":"x"}],"reasoning_effort":"extreme"}' >"$TMP/bad.json"
expect_rc 1 "chat request rejected by the encoder" "$BIN" tokenize --tokenizer "$T" --chat "$TMP/bad.json"
grep -q "invalid_value" "$TMP/err" && ok "encoder error names its code" || no "encoder error text: $(cat "$TMP/err")"

# streaming detokenization: chunks are whole characters/tokens and concatenate to the decode
printf '中文😀 <｜User｜> e\xcc\x81 end' >"$TMP/s.txt"
"$BIN" tokenize --tokenizer "$T" --file "$TMP/s.txt" >"$TMP/s.ids"
"$BIN" detokenize --tokenizer "$T" --stream --file "$TMP/s.ids" >"$TMP/s.stream"
"$PY" - "$TMP/s.stream" "$TMP/s.txt" <<'PYEOF' && ok "--stream chunks are JSON strings that concatenate to the text" || no "--stream output"
import json, sys
chunks = [json.loads(l) for l in open(sys.argv[1], encoding="utf-8")]
want = open(sys.argv[2], encoding="utf-8").read()
assert "".join(chunks) == want, chunks
assert "<｜User｜>" in chunks, chunks          # the control token arrives as one chunk
PYEOF
cat "$TMP/s.txt" | "$BIN" tokenize --tokenizer "$T" >"$TMP/stdin.ids"
cmp -s "$TMP/stdin.ids" "$TMP/s.ids" && ok "standard input" || no "standard input differs"
"$BIN" tokenize --tokenizer "$T" --no-special --text "<｜User｜>" >"$TMP/ns.ids"
[ "$(wc -w <"$TMP/ns.ids")" -gt 1 ] && ok "--no-special leaves literals as text" || no "--no-special"

# exit statuses
expect_rc 2 "unknown option" "$BIN" tokenize --tokenizer "$T" --bogus
expect_rc 2 "abbreviated option is not accepted" "$BIN" tokenize --tok "$T" --text hi
expect_rc 2 "two text sources" "$BIN" tokenize --tokenizer "$T" --text a --file "$TMP/s.txt"
expect_rc 5 "missing tokenizer" "$BIN" tokenize --tokenizer "$TMP/nope.json" --text hi
expect_rc 5 "missing input file" "$BIN" tokenize --tokenizer "$T" --file "$TMP/nope.txt"
printf 'ok\xff' >"$TMP/bad.txt"
expect_rc 1 "invalid UTF-8 input" "$BIN" tokenize --tokenizer "$T" --file "$TMP/bad.txt"
grep -q "offset 2" "$TMP/err" && ok "invalid UTF-8 error names the offset" || no "utf-8 error text: $(cat "$TMP/err")"
expect_rc 1 "id outside the vocabulary" "$BIN" detokenize --tokenizer "$T" --ids "1 129280"
expect_rc 1 "malformed id list" "$BIN" detokenize --tokenizer "$T" --ids "1 x2"
expect_rc 2 "detokenize unknown option" "$BIN" detokenize --tokenizer "$T" --skip
expect_rc 2 "release writer without ids" "$BIN" tokenize --write-release-tokenizer "$TMP/w" --vocab-size 1024
echo '{"model":{"type":"Unigram"}}' >"$TMP/uni.json"
expect_rc 1 "unsupported tokenizer.json" "$BIN" tokenize --tokenizer "$TMP/uni.json" --text hi
grep -q "uni.json" "$TMP/err" && ok "tokenizer error names the file" || no "tokenizer error text: $(cat "$TMP/err")"
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
