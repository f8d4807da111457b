#!/usr/bin/env bash
# The gates' decisions against a scripted second OpenAI-compatible endpoint (stub_server.py):
# every expected verdict, count and exit status below follows from the stub's script, not from the
# tools.  Covers gsm8k (known answers from a table; pass / investigate / fail, no_answer, the mode
# check), agent-gate (one scripted turn per signature), determinism (clean vs jittered logprobs),
# multibatch-gate (recall, batch-dependent answers), needle (Y / N / E outcomes), fisher (p-values
# from exact binomials in Python), port hygiene (restart mid-run, wrong model, unreachable server)
# and usage errors.
set -u
cd "$(dirname "$0")/../.."
DSFLASH_BIN=${DSFLASH_BIN:-$PWD/build/${BUILD:-release}/dsflash}
DS_TEST_TMP=${DS_TEST_TMP:-$(mktemp -d)}
. tests/tools13b/lib.sh
trap stop_stub EXIT
T=$DS_TEST_TMP/gates13b; mkdir -p "$T"
D=tests/data/gsm8k_arith
B=$DSFLASH_BIN

# ---- gsm8k: answer tables written from the data (the oracle) ----
"$PY" - "$D/test.jsonl" "$T" <<'EOP'
import json, sys
items = [json.loads(l) for l in open(sys.argv[1])]
gold = lambda a: a.rsplit("####", 1)[1].strip()
def table(name, f):
    json.dump({it["question"]: f(i, it) for i, it in enumerate(items)}, open(f"{sys.argv[2]}/{name}.json", "w"))
table("all", lambda i, it: "Working it out.\n#### " + gold(it["answer"]))
table("two_wrong", lambda i, it: "#### 99999" if i in (3, 7) else "So #### " + gold(it["answer"]) + " apples")
table("one_missing", lambda i, it: "no marker " + gold(it["answer"]) if i == 5 else "#### $" + gold(it["answer"]))
EOP
start_stub normal "$T/all.json"
"$B" gsm8k --base-url "$STUB" --data $D/test.jsonl --shots-file $D/train.jsonl --limit 40 --shots 8 --json-out "$T/g1.json" --items-out "$T/g1.jsonl" >"$T/g1.out" 2>&1
expect_rc "gsm8k all correct passes" 0 $?
jcheck "gsm8k summary 40/40" "$T/g1.json" 'j["correct"]==40 and j["total"]==40 and j["accuracy"]==1 and j["verdict"]=="pass" and j["no_answer"]==0 and j["schema"]=="v41-gsm8k/1" and j["server"]["instance_id"]=="stub-1"'
n=$("$PY" -c "import json,sys; r=[json.loads(l) for l in open(sys.argv[1])]; print(sum(1 for x in r if x['correct'] and x['pred']==x['gold'] and set(x)>={'id','gold','pred','correct','finish_reason','completion_tokens'}))" "$T/g1.jsonl")
[ "$n" = 40 ] && ok "gsm8k per-item JSONL rows" || bad "gsm8k per-item JSONL: $n good rows of 40"
stop_stub
start_stub normal "$T/two_wrong.json"
"$B" gsm8k --base-url "$STUB" --data $D/test.jsonl --shots-file $D/train.jsonl --limit 40 --json-out "$T/g2.json" --items-out "$T/g2.jsonl" >"$T/g2.out" 2>&1
expect_rc "gsm8k 38/40 (95%) is not a pass" 1 $?
jcheck "gsm8k 38/40 verdict investigate" "$T/g2.json" 'j["correct"]==38 and j["verdict"]=="investigate"'
"$B" gsm8k --base-url "$STUB" --data $D/test.jsonl --shots-file $D/train.jsonl --limit 8 --conc 3 --json-out "$T/g3.json" --items-out "$T/g3.jsonl" >"$T/g3.out" 2>&1
expect_rc "gsm8k 6/8 fails" 1 $?
jcheck "gsm8k 6/8 verdict fail" "$T/g3.json" 'j["correct"]==6 and j["total"]==8 and j["verdict"]=="fail"'
stop_stub
start_stub normal "$T/one_missing.json"
"$B" gsm8k --base-url "$STUB" --data $D/test.jsonl --shots-file $D/train.jsonl --limit 8 --json-out "$T/g4.json" --items-out "$T/g4.jsonl" >"$T/g4.out" 2>&1
jcheck "gsm8k answer without #### is no_answer (wrong); \$ stripped" "$T/g4.json" 'j["correct"]==7 and j["no_answer"]==1'
stop_stub
start_stub badmode "$T/all.json"
"$B" gsm8k --base-url "$STUB" --data $D/test.jsonl --shots-file $D/train.jsonl --limit 8 --json-out "$T/g5.json" --items-out "$T/g5.jsonl" >"$T/g5.out" 2>&1
rc=$?
[ $rc = 1 ] && grep -q 'mode check' "$T/g5.out" && [ ! -e "$T/g5.json" ] && ok "gsm8k mode check refuses a thinking-mode rendering (exit 1, no result)" || bad "gsm8k mode check: exit $rc; $(head -c 300 "$T/g5.out")"
stop_stub
printf '{"question": "q"}\n' >"$T/bad.jsonl"
"$B" gsm8k --base-url http://127.0.0.1:9 --data "$T/bad.jsonl" --shots-file $D/train.jsonl >"$T/g6.out" 2>&1
rc=$?; [ $rc = 5 ] && grep -q 'bad.jsonl:1: field "answer"' "$T/g6.out" && ok "gsm8k malformed record: exit 5 naming file:line:field" || bad "gsm8k malformed record: exit $rc $(cat "$T/g6.out")"
"$B" gsm8k --base-url http://127.0.0.1:9 --data "$T/none.jsonl" --shots-file $D/train.jsonl >/dev/null 2>&1
expect_rc "gsm8k missing data file" 5 $?
"$B" gsm8k --data $D/test.jsonl >/dev/null 2>&1
expect_rc "gsm8k without --shots-file is a usage error" 2 $?

# ---- agent-gate: the stub's script has one turn per outcome ----
start_stub normal
"$B" agent-gate --base-url "$STUB" --arms 2000c --reps 10 --json-out "$T/a1.json" >"$T/a1.out" 2>&1
expect_rc "agent-gate with failures exits 1" 1 $?
jcheck "agent-gate: every signature counted once" "$T/a1.json" '(a:=j["arms"][0]) is not None and a["pass"]==2 and a["design_md"]==1 and a["truncated"]==1 and a["fail"]==7 and a["errors"]==0 and a["signatures"]=={"empty_output":1,"malformed_tool_call":2,"wrong_tool":1,"mixed_script":1,"repetitive":1,"no_tool_call":1} and a["reasoning_effort"]=="high" and [s["outcome"] for s in a["samples"]]==["pass","pass","truncated","empty_output","malformed_tool_call","malformed_tool_call","wrong_tool","mixed_script","repetitive","no_tool_call"]'
jcheck "agent-gate: Wilson interval over non-truncated samples (2 of 9)" "$T/a1.json" 'abs(j["arms"][0]["wilson_lo"]-0.0632)<1e-3 and abs(j["arms"][0]["wilson_hi"]-0.5474)<1e-3'
"$B" agent-gate --base-url "$STUB" --arms 500,1kc --reps 1 --json-out "$T/a2.json" >"$T/a2.out" 2>&1
expect_rc "agent-gate all pass (first script turn) exits 0" 0 $?
jcheck "agent-gate two arms reported" "$T/a2.json" '[a["arm"] for a in j["arms"]]==["500","1kc"] and j["arms"][1]["document_chars"]==1000 and j["pass"]'
"$B" agent-gate --arms 8q >/dev/null 2>&1
expect_rc "agent-gate bad arm is a usage error" 2 $?
stop_stub

# ---- determinism ----
printf 'Say A.' >"$T/prompt.txt"
start_stub normal
"$B" determinism --base-url "$STUB" --prompt-file "$T/prompt.txt" --n 4 --gen-tokens 8 --json-out "$T/d1.json" >"$T/d1.out" 2>&1
expect_rc "determinism clean" 0 $?
jcheck "determinism report" "$T/d1.json" 'j["probe"]["uniq_top1"]==1 and j["probe"]["n_distinct_logprob"]==1 and j["probe"]["spread"]==0 and j["extended"]["identical_tokens"]==4 and j["variation"]=="sequential"'
"$B" determinism --base-url "$STUB" --prompt-file "$T/prompt.txt" --n 4 --gen-tokens 8 --concurrent --background 2 --json-out "$T/d2.json" >"$T/d2.out" 2>&1
expect_rc "determinism concurrent with background traffic" 0 $?
jcheck "determinism variation recorded" "$T/d2.json" 'j["variation"]=="concurrent" and j["background"]==2 and j["background_running_at_end"]==2'
stop_stub
start_stub jitter
"$B" determinism --base-url "$STUB" --prompt-file "$T/prompt.txt" --n 4 --json-out "$T/d3.json" >"$T/d3.out" 2>&1
expect_rc "determinism detects two logprob values" 1 $?
jcheck "determinism unclean report" "$T/d3.json" 'j["probe"]["n_distinct_logprob"]==2 and not j["probe"]["clean"] and abs(j["probe"]["spread"]-1e-6)<1e-9'
stop_stub
"$B" determinism --prompt-file "$T/nothing.txt" >/dev/null 2>&1
expect_rc "determinism missing prompt file" 5 $?

# ---- multibatch-gate ----
start_stub normal
"$B" multibatch-gate --base-url "$STUB" --long-tokens 2000 --json-out "$T/m1.json" >"$T/m1.out" 2>&1
expect_rc "multibatch-gate passes on a consistent endpoint" 0 $?
jcheck "multibatch summary" "$T/m1.json" 'j["A_needle"]==1 and j["A_recall"]==1 and j["B_itemwise"]==0 and j["C_short_vs_long"]==0 and j["C_long_completed"] and j["C_uniq2"]>=0.5'
stop_stub
start_stub flaky
"$B" multibatch-gate --base-url "$STUB" --parts B --json-out "$T/m2.json" >"$T/m2.out" 2>&1
expect_rc "multibatch-gate detects batch-dependent answers" 1 $?
jcheck "multibatch B mismatches counted" "$T/m2.json" 'j["B_itemwise"]>0 and "A_needle" not in j'
stop_stub

# ---- needle outcomes ----
start_stub normal
"$B" needle --base-url "$STUB" --doses 5000,8000 --reps 2 --json-out "$T/n1.json" >"$T/n1.out" 2>&1
expect_rc "needle all hits" 0 $?
jcheck "needle report" "$T/n1.json" 'all(d["pattern"]=="YY" and d["hits"]==2 and d["valid"]==2 and abs(d["depth"]-0.5)<=0.005 and abs(d["wilson_lo"]-0.3424)<1e-3 and d["wilson_hi"]>0.9999 and len(d["samples"])==2 and len({s["nonce"] for s in d["samples"]})==2 for d in j["doses"])'
"$B" needle --base-url "$STUB" --doses 1000 --reps 2 --needles 4 --json-out "$T/n4.json" >"$T/n4.out" 2>&1
jcheck "needle 4-needle variant scores all four codes (stub knows one)" "$T/n4.json" 'j["doses"][0]["pattern"]=="NN" and j["doses"][0]["per_needle_hits"]==[0,0,0,0]'
stop_stub
start_stub needle-err
"$B" needle --base-url "$STUB" --doses 800 --reps 4 --json-out "$T/n2.json" >"$T/n2.out" 2>&1
expect_rc "needle with errors fails the gate" 1 $?
jcheck "needle E excluded from valid" "$T/n2.json" 'j["doses"][0]["pattern"]=="YEYE" and j["doses"][0]["valid"]==2 and j["doses"][0]["hits"]==2'
stop_stub
start_stub needle-no
"$B" needle --base-url "$STUB" --doses 800 --reps 2 --json-out "$T/n3.json" >"$T/n3.out" 2>&1
expect_rc "needle misses fail the gate" 1 $?
jcheck "needle N outcomes" "$T/n3.json" 'j["doses"][0]["pattern"]=="NN" and j["doses"][0]["wilson_lo"]==0'
stop_stub

# ---- port hygiene ----
start_stub restart
"$B" needle --base-url "$STUB" --doses 500 --reps 1 --json-out "$T/r1.json" >"$T/r1.out" 2>&1
rc=$?; [ $rc = 1 ] && grep -q 'instance_id changed' "$T/r1.out" && ok "a restart mid-run invalidates the run" || bad "restart: exit $rc"
jcheck "restart recorded" "$T/r1.json" 'j["server_restarted"] and not j["pass"]'
stop_stub
start_stub normal
"$B" kv-walk --base-url "$STUB" --model other-model --tokens 100 >"$T/w.out" 2>&1
rc=$?; [ $rc = 1 ] && grep -q 'does not list it' "$T/w.out" && ok "--model not listed: exit 1" || bad "--model mismatch: exit $rc"
stop_stub
"$B" kv-walk --base-url http://127.0.0.1:9 --tokens 100 >/dev/null 2>&1
expect_rc "unreachable server" 3 $?
"$B" kv-walk --tokens 12x >/dev/null 2>&1
expect_rc "bad value" 2 $?
"$B" kv-walk --tok 100 >/dev/null 2>&1
expect_rc "abbreviated option refused" 2 $?

# ---- fisher: p-values from exact binomials in Python ----
for t in "3 1 1 3" "1 9 11 3" "8 2 1 5" "0 5 5 0" "12 5 3 14"; do
    got=$("$B" fisher $t --json | "$PY" -c "import json,sys; print(json.load(sys.stdin)['p'])")
    want=$("$PY" -c "
from math import comb
a,b,c,d=map(int,'$t'.split()); r1,r2,c1=a+b,c+d,a+c
P=lambda x: comb(r1,x)*comb(r2,c1-x)/comb(r1+r2,c1)
print(sum(P(x) for x in range(max(0,c1-r2),min(c1,r1)+1) if P(x)<=P(a)*(1+1e-7)))")
    "$PY" -c "import sys; sys.exit(0 if abs($got-$want)<=1e-9+1e-7*$want else 1)" && ok "fisher $t: p $got" || bad "fisher $t: p $got, expected $want"
done
"$B" fisher 1 2 3 >/dev/null 2>&1; expect_rc "fisher with 3 counts" 2 $?
"$B" fisher 1 2 3 -4 >/dev/null 2>&1; expect_rc "fisher negative count" 2 $?

# ---- --help for every command ----
for c in needle kv-walk gsm8k agent-gate multibatch-gate determinism fisher; do
    out=$("$B" $c --help 2>&1); rc=$?
    [ $rc = 0 ] && echo "$out" | grep -q "usage: dsflash $c" && ok "$c --help" || bad "$c --help (exit $rc)"
done
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
