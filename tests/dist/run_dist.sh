#!/usr/bin/env bash
# Tensor and expert parallelism over OpenMPI (SERVING.md §14), oversubscribed on any core count.
#
# 1. tiny at R = 2, 4, 8 in ordered mode: the `generate --trace` file (every processed row's hidden
#    states after every layer, every logit row, the generated ids) is byte-identical to the one of a
#    plain process without mpirun (cmp), in both numerics tiers, with prefill chunks 1, 7 and the
#    whole prompt, with and without --expert-parallel.
# 2. fast reduce mode: greedy agreement and max |delta logprob| against one process (NumPy reader,
#    tests/dist/compare_traces.py), printed and gated at >= 99% and <= 1e-2 (§14).
# 3. Start-up refusals: world size != --tensor-parallel-size; a different checkpoint on one rank;
#    different flags on one rank (the message names the rank and the field); Engram tables copied to
#    huge pages by several ranks of one host.
# 4. Failure: rank 1 killed mid-run: every rank exits, mpirun exits non-zero within seconds, no
#    dsflash process of the job is left.  Rank 1 hung inside a step (DSFLASH_DEBUG_HANG): rank 0's
#    collective watchdog stops the job within --dist-timeout (+ launcher teardown), naming the cause.
# 5. serve: R = 2 and 4 (prefix caching on) against one process (off): identical greedy completions
#    and logprobs, cached prompt tokens counted; a rank killed mid-stream; SIGTERM to rank 0 stops the
#    whole job with exit 0.
# Env: DSFLASH_BIN, DS_TEST_TMP, BUILD.  Ends with "N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
PY=/usr/bin/python3
BIN=${DSFLASH_BIN:-$PWD/build/${BUILD:-release}/dsflash}
TMP=${DS_TEST_TMP:-$(mktemp -d)}/dist
rm -rf "$TMP"; mkdir -p "$TMP"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# the sanitizer build's leak checker does not know MPI's intentional one-time allocations
export ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0
pass=0; fail=0
ok() { echo "PASS $*"; pass=$((pass + 1)); }
SECONDS=0; last_lap=0
lap() { echo "  [$1: $((SECONDS - last_lap)) s]"; last_lap=$SECONDS; }  # where the suite's time goes
ko() { echo "FAIL $*"; fail=$((fail + 1)); }
# Each job gets its own OpenMPI session directory: with the default shared one under /tmp, a job that
# started while another was starting or being torn down (the killed and hung ranks, two servers started
# together) could fail at start-up with "orte_session_dir failed" when the other removed the shared
# directory; one CI run lost the R = 4 server that way.
mpi_dir() { mktemp -d "$TMP/ompi.XXXXXX"; }
MPIRUN="mpirun --oversubscribe --bind-to none"
if ! command -v mpirun >/dev/null; then ko "mpirun is not installed (scripts/install-deps.sh)"; echo "$pass passed, $fail failed"; exit 1; fi

M="$TMP/tiny"
"$BIN" mkmodel --config tiny --out "$M" --quiet > "$TMP/mk.log" 2>&1 || ko "mkmodel tiny: $(tail -2 "$TMP/mk.log")"
"$BIN" mkmodel --config tiny --out "$TMP/tiny_seed2" --seed 2 --quiet > "$TMP/mk2.log" 2>&1 || ko "mkmodel tiny seed 2"
PROMPT=$(seq -s, 3 2 121)   # 60 tokens: crosses the window (16) and the candidate blocks
GEN="--prompt-ids $PROMPT --max-tokens 10 --threads 1 --ignore-eos"

# ---- 1. bit identity, ordered mode
# cases: tier chunk R expert-parallel (chosen to cover each shape at least once within ~3 min)
CASES="fast:1:2:on fast:7:2:off fast:7:4:on fast:7:8:on exact:7:2:on exact:7:4:off exact:7:8:on exact:60:2:off"
for case in $CASES; do
    IFS=: read -r num chunk R ep <<< "$case"
    ref="$TMP/ref_${num}_$chunk.st"
    if [ ! -f "$ref" ] && ! "$BIN" generate --model "$M" $GEN --numerics $num --chunk $chunk --trace "$ref" > "$TMP/ref.log" 2>&1; then
        ko "one process, $num, chunk $chunk: $(tail -2 "$TMP/ref.log")"; continue
    fi
    out="$TMP/r${R}_${num}_${chunk}_$ep.st"
    if $MPIRUN --mca orte_tmpdir_base "$(mpi_dir)" -np $R "$BIN" generate --model "$M" $GEN --numerics $num --chunk $chunk --trace "$out" \
         --tensor-parallel-size $R --expert-parallel $ep > "$TMP/run.log" 2>&1 && cmp -s "$ref" "$out"; then
        ok "R=$R $num chunk $chunk expert-parallel $ep: trace (hidden states, logits, ids) byte-identical to one process"
    else
        ko "R=$R $num chunk $chunk expert-parallel $ep: $(grep -E 'E_|error|differ' "$TMP/run.log" | head -2) $(cmp "$ref" "$out" 2>&1 | head -1)"
    fi
done
"$BIN" generate --model "$M" $GEN --numerics fast --tensor-parallel-size 1 > "$TMP/tp1.log" 2>&1 \
    && grep -q '^generated:' "$TMP/tp1.log" && ok "without mpirun, --tensor-parallel-size 1 runs as one process" \
    || ko "plain --tensor-parallel-size 1: $(tail -2 "$TMP/tp1.log")"

lap "1 bit identity"
# ---- 2. fast reduce mode
for R in 4 8; do
    out="$TMP/fastmode_$R.st"
    $MPIRUN --mca orte_tmpdir_base "$(mpi_dir)" -np $R "$BIN" generate --model "$M" $GEN --numerics fast --chunk 7 --trace "$out" --tensor-parallel-size $R \
        --reduce-mode fast > "$TMP/fm.log" 2>&1
    line=$("$PY" tests/dist/compare_traces.py "$TMP/ref_fast_7.st" "$out" 2>&1)
    echo "  fast reduce mode R=$R vs one process: $line"
    if "$PY" -c "import sys; a=sys.argv[1].split(); n,m=map(int,a[1].split('/')); sys.exit(0 if n>=0.99*m and float(a[3])<=1e-2 else 1)" "$line" 2>/dev/null; then
        ok "fast reduce mode R=$R: greedy agreement >= 99% and max |dlogprob| <= 1e-2"
    else
        ko "fast reduce mode R=$R: $line"
    fi
done

lap "2 fast mode"
# ---- 3. start-up refusals
expect_fail() {  # what, message pattern, command...
    local what=$1 pat=$2; shift 2
    if timeout 60 "$@" > "$TMP/neg.log" 2>&1; then ko "$what: exited 0"; return; fi
    if grep -qE "$pat" "$TMP/neg.log"; then ok "$what"; else ko "$what: $(grep -v '^-\|^ *$' "$TMP/neg.log" | head -3)"; fi
}
A="--prompt-ids 1,2,3 --max-tokens 2 --threads 1"
expect_fail "world size 2 with --tensor-parallel-size 4 is refused" "tensor-parallel-size 4: expected the MPI world size 2" \
    $MPIRUN --mca orte_tmpdir_base "$(mpi_dir)" -np 2 "$BIN" generate --model "$M" $A --tensor-parallel-size 4
expect_fail "--tensor-parallel-size 2 without mpirun is refused" "expected the MPI world size 1" \
    "$BIN" generate --model "$M" $A --tensor-parallel-size 2
expect_fail "--engram-residency huge-pages with 2 ranks on one host is refused (each would copy the tables)" \
    "E_ENGRAM_RESIDENCY: engram residency huge-pages: 2 ranks share this host and each would hold its own copy" \
    $MPIRUN --mca orte_tmpdir_base "$(mpi_dir)" -np 2 "$BIN" generate --model "$M" $A --tensor-parallel-size 2 --engram-residency huge-pages
expect_fail "--tensor-parallel-size 3 is refused" "expected 1, 2, 4 or 8, found 3" \
    "$BIN" generate --model "$M" $A --tensor-parallel-size 3
expect_fail "a different checkpoint on rank 1 is refused, naming rank and field" \
    "E_DIST_MISMATCH: rank 1: checkpoint weights .* differs from rank 0" \
    $MPIRUN --mca orte_tmpdir_base "$(mpi_dir)" -np 1 "$BIN" generate --model "$M" $A --tensor-parallel-size 2 : -np 1 "$BIN" generate --model "$TMP/tiny_seed2" $A --tensor-parallel-size 2
expect_fail "different flags on rank 1 are refused, naming rank and field" "E_DIST_MISMATCH: rank 1: flags differs from rank 0" \
    $MPIRUN --mca orte_tmpdir_base "$(mpi_dir)" -np 1 "$BIN" generate --model "$M" $A --tensor-parallel-size 2 : -np 1 "$BIN" generate --model "$M" $A --tensor-parallel-size 2 --chunk 2
# placement flags are each rank's own (decision 200): rank 0 on node 0 with one thread, rank 1
# unplaced with two, and the trace is still the one process's
node=all; [ -e /sys/devices/system/node/node0/cpulist ] && node=0
G2="--prompt-ids $PROMPT --max-tokens 10 --ignore-eos --numerics fast --chunk 7 --tensor-parallel-size 2 --trace $TMP/placed.st"
if $MPIRUN --mca orte_tmpdir_base "$(mpi_dir)" -np 1 "$BIN" generate --model "$M" $G2 --threads 1 --numa-nodes $node \
     : -np 1 "$BIN" generate --model "$M" $G2 --threads=2 --numa-nodes all > "$TMP/placed.log" 2>&1 && cmp -s "$TMP/ref_fast_7.st" "$TMP/placed.st"; then
    ok "ranks with their own --threads and --numa-nodes ($node / all) start, trace byte-identical to one process"
else ko "ranks with their own --threads and --numa-nodes: $(grep -E 'E_|differ' "$TMP/placed.log" | head -2)"; fi

lap "3 refusals"
# ---- 4. a rank dies mid-run
$MPIRUN --mca orte_tmpdir_base "$(mpi_dir)" -np 2 "$BIN" generate --model "$M" --prompt-ids 1,2,3 --max-tokens 4000 --ignore-eos --threads 1 \
    --tensor-parallel-size 2 > "$TMP/kill.log" 2>&1 &
mp=$!
victim=""
for _ in $(seq 1 100); do
    sleep 0.2
    for p in $(pgrep -P $mp 2>/dev/null); do
        grep -qz '^OMPI_COMM_WORLD_RANK=1$' /proc/$p/environ 2>/dev/null && victim=$p
    done
    [ -n "$victim" ] && grep -q 'resident' "$TMP/kill.log" && break
done
ranks=$(pgrep -P $mp | tr '\n' ' ')
sleep 1
t0=$(date +%s.%N)
[ -n "$victim" ] && kill -9 "$victim"
for _ in $(seq 1 150); do kill -0 $mp 2>/dev/null || break; sleep 0.1; done
if kill -0 $mp 2>/dev/null; then ko "rank 1 killed: mpirun still running after 15 s"; kill -9 $mp; fi
wait $mp; rc=$?
dt=$(echo "$(date +%s.%N) - $t0" | bc)
left=""
for _ in $(seq 1 50); do   # PR_SET_PDEATHSIG: the ranks follow their launcher within moments
    left=""
    for p in $ranks; do [ -d /proc/$p ] && ! grep -q '^State:.*Z' /proc/$p/status 2>/dev/null && left="$left $p"; done
    [ -z "$left" ] && break
    sleep 0.1
done
echo "  rank 1 (pid ${victim:-none}) killed: mpirun rc $rc after ${dt} s, ranks left:${left:- none}"
if [ -n "$victim" ] && [ "$rc" != 0 ] && [ -z "$left" ]; then ok "a killed rank stops the job: non-zero exit, no rank left"
else ko "a killed rank: victim=${victim:-none} rc=$rc left=$left"; fi

lap "4 killed rank"
# ---- 4b. a rank hangs inside a step (alive, not answering): the watchdog of the others stops the job
t0=$(date +%s.%N)
timeout 60 $MPIRUN --mca orte_tmpdir_base "$(mpi_dir)" -np 2 -x DSFLASH_DEBUG_HANG=1:40 "$BIN" generate --model "$M" --prompt-ids 1,2,3 --max-tokens 400 \
    --ignore-eos --threads 1 --tensor-parallel-size 2 --dist-timeout 2 > "$TMP/hang.log" 2>&1
rc=$?
dt=$(echo "$(date +%s.%N) - $t0" | bc)
left=""
for p in $(pgrep -x dsflash); do grep -qz '^DSFLASH_DEBUG_HANG=1:40$' /proc/$p/environ 2>/dev/null && left="$left $p"; done
echo "  rank 1 hung at its 40th collective, --dist-timeout 2: mpirun rc $rc after ${dt} s, ranks left:${left:- none}"
if [ $rc != 0 ] && [ $rc != 124 ] && grep -q 'DSFLASH_DEBUG_HANG: not responding' "$TMP/hang.log" \
   && grep -q 'E_DIST_TIMEOUT: rank 0: a collective has waited more than 2.0 s' "$TMP/hang.log" && [ -z "$left" ] \
   && [ "$(echo "$dt < 20" | bc)" = 1 ]; then
    ok "a hung rank stops the job: rank 0's watchdog names the timeout, non-zero exit in ${dt} s (< 20), no rank left"
else ko "a hung rank: rc=$rc after ${dt} s, left=${left:-none}: $(grep -E 'E_DIST|HANG' "$TMP/hang.log" | head -3)"; fi

lap "4b hung rank"
# ---- 5. serve: rank 0 runs HTTP and the scheduler, the other ranks replay its steps
PORT0=$((18000 + RANDOM % 1000)); PORT2=$((PORT0 + 1)); PORT4=$((PORT0 + 2))
# block size 16: a 70-token prompt then spans 4 full blocks that a repeated prompt can hit
SARGS="--model $M --threads 1 --kv-cache-memory 64MiB --self-check quick --block-size 16"
wait_ready() {  # log pid
    for _ in $(seq 1 240); do grep -q '^READY' "$1" && return 0; kill -0 "$2" 2>/dev/null || return 1; sleep 0.5; done; return 1
}
"$BIN" serve $SARGS --port $PORT0 --num-speculative-tokens 0 --no-enable-prefix-caching > "$TMP/s1.log" 2>&1 & s1=$!
$MPIRUN --mca orte_tmpdir_base "$(mpi_dir)" -np 2 "$BIN" serve $SARGS --port $PORT2 --tensor-parallel-size 2 > "$TMP/s2.log" 2>&1 & s2=$!
$MPIRUN --mca orte_tmpdir_base "$(mpi_dir)" -np 4 "$BIN" serve $SARGS --port $PORT4 --tensor-parallel-size 4 --num-speculative-tokens 0 --expert-parallel off > "$TMP/s4.log" 2>&1 & s4=$!
up=1
for x in "s1 $s1" "s2 $s2" "s4 $s4"; do set -- $x; wait_ready "$TMP/$1.log" $2 || { up=0; ko "serve $1 not READY: $(tail -3 "$TMP/$1.log")"; }; done
req_ids() {  # port ids max -> writes json
    curl -s --max-time 120 localhost:$1/v1/completions -H 'content-type: application/json' \
        -d "{\"model\":\"deepseek-v41\",\"prompt\":[$2],\"max_tokens\":$3,\"temperature\":0,\"logprobs\":3,\"ignore_eos\":true}"
}
req() { req_ids $1 "$(seq -s, $2 3 $(($2 + 3 * ($3 - 1))))" $4; }  # port prompt-start n max
prefix_hits() { curl -s localhost:$1/metrics | awk '/^dsflash_prefix_cache_hits_total/ {print $2}'; }
if [ $up = 1 ]; then
    LONG=$(seq -s, 100 3 307)   # 70 tokens
    for port in $PORT0 $PORT2 $PORT4; do
        for k in 1 2 3; do req $port $((k * 7)) $((20 + 13 * k)) 24 > "$TMP/c_${port}_$k.json" & done   # batched
        wait $(jobs -p | grep -v -e "^$s1$" -e "^$s2$" -e "^$s4$") 2>/dev/null
        req_ids $port $LONG 16 > "$TMP/c_${port}_4.json"
        # prefix cache (on at R = 2 and 4, off at R = 1): the same prompt again hits its 4 full blocks,
        # a longer prompt with that prefix hits them too and computes the rest
        req_ids $port $LONG 16 > "$TMP/c_${port}_5.json"
        req_ids $port $LONG,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22 16 > "$TMP/c_${port}_6.json"
    done
    for R in 2 4; do
        port=$([ $R = 2 ] && echo $PORT2 || echo $PORT4)
        same=1
        for k in 1 2 3 4 5 6; do
            "$PY" -c "import json,sys; a=json.load(open(sys.argv[1]))['choices'][0]; b=json.load(open(sys.argv[2]))['choices'][0]
sys.exit(0 if a['text']==b['text'] and a['logprobs']==b['logprobs'] and len(a['logprobs']['tokens'])>=16 else 1)" \
                "$TMP/c_${PORT0}_$k.json" "$TMP/c_${port}_$k.json" 2>/dev/null || same=0
        done
        hits=$(prefix_hits $port); hits0=$(prefix_hits $PORT0)
        echo "  serve R=$R: prefix-cache hit tokens $hits (R=1 with the cache off: $hits0)"
        what=$([ $R = 2 ] && echo "speculation on (5 drafts) against plain decoding" || echo "expert parallel off, no speculation")
        [ $same = 1 ] && ok "serve R=$R ($what): 6 greedy completions (3 concurrent) with top-3 logprobs identical to one process" \
                      || ko "serve R=$R ($what): completions differ from one process ($(head -c 200 "$TMP/c_${port}_1.json"))"
        [ "${hits:-0}" -ge 128 ] && [ "${hits0:-1}" = 0 ] \
            && ok "serve R=$R: prefix caching on across ranks ($hits cached prompt tokens) gives the outputs of R=1 with it off" \
            || ko "serve R=$R: prefix cache hit tokens ${hits:-none} (expected >= 128), R=1 ${hits0:-none} (expected 0)"
    done
    # memory plan of a rank: the rows, groups and head rows other ranks serve are never read here, and
    # the pages of what it prepared are given back, so a rank's mapped bytes are those one process
    # still reads (embeddings, Engram, norms), not the whole checkpoint (R=4: 3/4 of wq_b, wo_a, wo_b
    # and the head belong to the others)
    curl -s localhost:$PORT0/server_info > "$TMP/info1.json"; curl -s localhost:$PORT4/server_info > "$TMP/info4.json"
    if "$PY" - "$TMP/info1.json" "$TMP/info4.json" "$TMP/s4.log" <<'EOP'
import json, re, sys
one, four = (json.load(open(f))["weights_mapped_bytes"] for f in sys.argv[1:3])
other = [float(x) for x in re.findall(r"([0-9.]+) MiB other ranks serve left out", open(sys.argv[3]).read())]
assert other and min(other) > 0, other
assert abs(four - one) <= 0.02 * one, (one, four)
print(f"  mapped bytes in the memory plan: R=1 {one}, R=4 rank 0 {four}; other ranks' share left out: {other[0]} MiB")
EOP
    then ok "serve R=4: a rank's memory plan counts the mapped bytes one process reads, not the other ranks' shares"
    else ko "serve R=4: memory plan of a rank ($(grep -m1 'other ranks serve' "$TMP/s4.log"))"; fi
    # a rank dies mid-stream: the client sees the stream end without [DONE], every rank exits
    curl -sN --max-time 60 localhost:$PORT2/v1/completions -H 'content-type: application/json' \
        -d '{"model":"deepseek-v41","prompt":[1,2,3],"max_tokens":3000,"temperature":0,"ignore_eos":true,"stream":true}' > "$TMP/stream.txt" 2>&1 &
    cu=$!
    # kill as soon as the stream is flowing (a fixed sleep let a fast build finish all 3000 tokens first)
    for _ in $(seq 1 600); do [ "$(grep -c '^data: {' "$TMP/stream.txt" 2>/dev/null)" -ge 20 ] && break; sleep 0.05; done
    victim=""
    for p in $(pgrep -P $s2); do grep -qz '^OMPI_COMM_WORLD_RANK=1$' /proc/$p/environ 2>/dev/null && victim=$p; done
    ranks=$(pgrep -P $s2 | tr '\n' ' ')
    t0=$(date +%s.%N)
    [ -n "$victim" ] && kill -9 $victim
    for _ in $(seq 1 150); do kill -0 $s2 2>/dev/null || break; sleep 0.1; done
    wait $s2; rc=$?
    wait $cu; crc=$?
    dt=$(echo "$(date +%s.%N) - $t0" | bc)
    left=""
    for _ in $(seq 1 50); do left=""; for p in $ranks; do [ -d /proc/$p ] && left="$left $p"; done; [ -z "$left" ] && break; sleep 0.1; done
    chunks=$(grep -c '^data: {' "$TMP/stream.txt")
    echo "  serve R=2, rank 1 killed mid-stream after $chunks chunks: mpirun rc $rc after ${dt} s, curl rc $crc, [DONE] $(grep -c 'DONE' "$TMP/stream.txt"), ranks left:${left:- none}"
    if [ -n "$victim" ] && [ $rc != 0 ] && [ $chunks -gt 0 ] && ! grep -q 'DONE' "$TMP/stream.txt" && [ -z "$left" ]; then
        ok "serve: a rank killed mid-stream ends the job (non-zero), the client's stream ends without [DONE], no rank left"
    else ko "serve kill: victim=${victim:-none} rc=$rc chunks=$chunks left=$left"; fi
fi
# graceful stop of a multi-rank server: SIGTERM to rank 0 (the pid its READY line prints) drains,
# tells the other ranks to stop, and the whole job exits 0 (a SIGTERM to mpirun itself is OpenMPI's
# job abort: it forwards the signal and exits 1 whatever the ranks do, so the README says to signal
# rank 0)
if [ $up = 1 ]; then
    r0=$(sed -n 's/^READY .* pid=\([0-9]*\).*/\1/p' "$TMP/s4.log" | head -1)
    ranks=$(pgrep -P $s4 | tr '\n' ' ')
    t0=$(date +%s.%N)
    [ -n "$r0" ] && kill -TERM "$r0"
    for _ in $(seq 1 400); do kill -0 $s4 2>/dev/null || break; sleep 0.1; done
    wait $s4; rc=$?
    dt=$(echo "$(date +%s.%N) - $t0" | bc)
    left=""
    for _ in $(seq 1 50); do left=""; for p in $ranks; do [ -d /proc/$p ] && left="$left $p"; done; [ -z "$left" ] && break; sleep 0.1; done
    echo "  serve R=4, SIGTERM to rank 0 (pid ${r0:-none}): mpirun rc $rc after ${dt} s, ranks left:${left:- none}"
    if [ -n "$r0" ] && [ "$rc" = 0 ] && grep -q 'drained' "$TMP/s4.log" && [ -z "$left" ]; then
        ok "serve R=4: SIGTERM to rank 0 drains and the whole job exits 0, no rank left"
    else ko "serve R=4 SIGTERM to rank 0: pid=${r0:-none} rc=$rc left=$left $(tail -2 "$TMP/s4.log")"; fi
fi
kill -TERM $s1 $s4 2>/dev/null
for x in $s1 $s4; do wait $x 2>/dev/null; done

lap "5 serve"

# ---- 6. the benchmark under mpirun: perf decode at R = 2 prints its table and every rank's
# communication share (issue: the share of step time spent in collectives is a reported figure)
$MPIRUN --mca orte_tmpdir_base "$(mpi_dir)" -np 2 "$BIN" perf decode --model "$M" --tensor-parallel-size 2 --threads 1 --tokens 8 --prompt-tokens 16 \
    > "$TMP/perf2.log" 2>&1; rc=$?
if [ $rc = 0 ] && grep -q '^| decode 8 tokens | [0-9.]* tok/s' "$TMP/perf2.log" \
    && [ "$(grep -c '^  decode: rank [01]/2: collectives [0-9.]* s of [0-9.]* s = [0-9.]*% communication' "$TMP/perf2.log")" = 2 ] \
    && grep -q '^  decode: [0-9.]* KiB through collectives per token on rank 0' "$TMP/perf2.log"; then
    ok "perf decode under mpirun -np 2: decode row, both ranks' communication share, bytes per token"
else ko "perf decode under mpirun -np 2: rc $rc $(tail -3 "$TMP/perf2.log")"; fi
lap "6 perf"
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
