#!/usr/bin/env bash
# needle and the gates end to end against a live `dsflash serve` of the tiny (random-weight)
# model.  A random model cannot pass the accuracy gates, so the checks here are what must hold on
# any model: every request succeeds (no E / errors), the reports have their shape, exit codes
# agree with the reports — and the engine properties the gates measure hold: determinism is 100%
# clean (sequential, concurrent, with background traffic) and multibatch parts B and C find 0
# answers changed by batching or by a concurrent long prefill.
set -u
cd "$(dirname "$0")/../.."
. tests/server/serve_lib.sh
. tests/tools13b/lib.sh
T=$DS_TEST_TMP/live13b; mkdir -p "$T"
B=$DSFLASH_BIN
D=tests/data/gsm8k_arith
# rc_matches NAME RC FILE: exit 0 exactly when the report says pass
rc_matches() {
    local want=1; "$PY" -c "import json,sys; sys.exit(0 if json.load(open(sys.argv[1]))['pass'] else 1)" "$3" 2>/dev/null && want=0
    [ "$2" = "$want" ] && ok "$1: exit $2 agrees with the report" || bad "$1: exit $2, report says $want"
}

if start_server "$T/s.log" --kv-cache-memory 256MiB; then
    "$B" needle --base-url "$BASE" --doses 1200 --reps 2 --max-tokens 8 --json-out "$T/n.json" >"$T/n.out" 2>&1
    rc_matches "needle" $? "$T/n.json"
    jcheck "needle on the server: 2 valid samples, depth within one record of 50%" "$T/n.json" '(d:=j["doses"][0]) is not None and d["valid"]==2 and d["n"]==2 and "E" not in d["pattern"] and abs(d["depth"]-0.5)<0.01 and 1000<=d["actual_tokens"]<=4000 and len(j["server"]["instance_id"])>0'
    "$B" gsm8k --base-url "$BASE" --data $D/test.jsonl --shots-file $D/train.jsonl --limit 4 --shots 2 --max-tokens 16 \
        --json-out "$T/g.json" --items-out "$T/g.jsonl" >"$T/g.out" 2>&1
    rc=$?
    jcheck "gsm8k on the server: mode check passed, 4 items, no errors" "$T/g.json" 'j["total"]==4 and j["errors"]==0 and j["mode"]=="chat"'
    [ $rc = 1 ] || [ $rc = 0 ] && ok "gsm8k exit $rc" || bad "gsm8k exit $rc"
    "$B" agent-gate --base-url "$BASE" --arms 250,1500c --reps 2 --max-tokens 16 --json-out "$T/a.json" >"$T/a.out" 2>&1
    rc_matches "agent-gate" $? "$T/a.json"
    jcheck "agent-gate on the server: every sample classified" "$T/a.json" 'all(a["errors"]==0 and a["pass"]+a["fail"]+a["truncated"]==2 and a["prompt_tokens"]>0 for a in j["arms"])'
    printf 'Count from one to ten.' >"$T/prompt.txt"
    "$B" determinism --base-url "$BASE" --prompt-file "$T/prompt.txt" --n 4 --gen-tokens 16 --json-out "$T/d1.json" >"$T/d1.out" 2>&1
    expect_rc "determinism: sequential is 100% clean" 0 $?
    "$B" determinism --base-url "$BASE" --prompt-file "$T/prompt.txt" --n 4 --gen-tokens 16 --concurrent --background 1 \
        --json-out "$T/d2.json" >"$T/d2.out" 2>&1
    expect_rc "determinism: concurrent with background traffic is 100% clean" 0 $?
    jcheck "determinism report" "$T/d2.json" 'j["probe"]["clean"] and j["extended"]["identical_tokens"]==4 and j["background"]==1'
    "$B" multibatch-gate --base-url "$BASE" --long-tokens 1000 --long-gen-tokens 16 --max-tokens 8 --json-out "$T/m.json" >"$T/m.out" 2>&1
    rc_matches "multibatch-gate" $? "$T/m.json"
    jcheck "multibatch: batching and a concurrent long prefill change no answer" "$T/m.json" 'j["B_itemwise"]==0 and j["C_short_vs_long"]==0 and j["C_long_completed"] and "A_needle" in j'
else bad "server did not start"; fi
stop_server
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
