#!/usr/bin/env bash
# Command-line flags of serve, generate and bench (issue: flags accepted and then ignored, e.g.
# `--spec-tokens-per-batch-size banana` reached READY): every malformed or unsupported value exits 2
# before any work with one line naming the flag, the value and what is expected; then a live server
# started with a fake /proc/meminfo (DSFLASH_MEMINFO: 24 GiB total, 4 GiB available, as when another
# process holds the memory) must size its KV budget from MemAvailable and say so in the capacity
# line, the figure checked against the formula computed here from config.json.  Then
# `--engram-residency huge-pages`: refused naming both figures when MemAvailable is below the tables
# (or naming the setting where transparent huge pages are never), else the §13 residency sample says
# 100%, /server_info echoes it and the tables' bytes leave the mapped count; `locked` under a zero
# memlock limit fails naming file, tensor and limit.  Last, `--numa-nodes`: a node the host lacks and
# a malformed list are refused; node 0 (where sysfs has it) generates with one pinned thread per core,
# and a server on it echoes the nodes and threads and plans memory from node 0's MemTotal.
set -u
cd "$(dirname "$0")/../.."
. tests/server/serve_lib.sh
pass=0; fail=0
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; [ -n "${2:-}" ] && echo "     $2"; return 0; }
B=$DSFLASH_BIN
OUT=$DS_TEST_TMP/flags.$$
mkdir -p "$OUT"

# expect_usage "description" "exact first line" command...
expect_usage() {
    local d=$1 want=$2; shift 2
    timeout 20 "$@" > "$OUT/out" 2> "$OUT/err"; local rc=$?
    local first; first=$(head -1 "$OUT/err")
    if [ $rc = 2 ] && [ "$first" = "$want" ]; then ok "$d"
    else bad "$d" "exit $rc, first line: $first (wanted: $want)"; fi
}
S=(serve --model /nonexistent)
expect_usage "serve --spec-tokens-per-batch-size banana" \
    "dsflash serve: --spec-tokens-per-batch-size \"banana\": expected \"lo-hi:K,...\" with 1 <= lo <= hi, K >= 0, found \"banana\"" "$B" "${S[@]}" --spec-tokens-per-batch-size banana
expect_usage "serve --spec-tokens-per-batch-size 1-4:5 (does not cover --max-num-seqs 32)" \
    "dsflash serve: --spec-tokens-per-batch-size: expected ranges covering 1..32 (--max-num-seqs), found 5 uncovered" "$B" "${S[@]}" --spec-tokens-per-batch-size 1-4:5
expect_usage "serve --expert-parallel on (one process)" \
    "dsflash serve: --expert-parallel on: expected --tensor-parallel-size > 1, found 1" "$B" "${S[@]}" --expert-parallel on
expect_usage "serve --sampler-mask-ids 9-3" "dsflash serve: --sampler-mask-ids: '9-3' at offset 0: expected an id or a range a-b (a <= b) within [0, 2147483647], comma-separated, or none" "$B" "${S[@]}" --sampler-mask-ids 9-3
expect_usage "serve --expert-parallel banana" "dsflash serve: --expert-parallel: expected auto, on or off, got 'banana'" "$B" "${S[@]}" --expert-parallel banana
expect_usage "serve --tensor-parallel-size 2 without mpirun" \
    "dsflash serve: --tensor-parallel-size 2: expected the MPI world size 1 (launch with mpirun -np 2 ... --tensor-parallel-size 2)" "$B" "${S[@]}" --tensor-parallel-size 2
expect_usage "serve --num-speculative-tokens 6" "dsflash serve: --num-speculative-tokens: expected an integer in [0, 5], got '6'" "$B" "${S[@]}" --num-speculative-tokens 6
expect_usage "serve --spec-guard banana" "dsflash serve: --spec-guard: expected on, warn or off, got 'banana'" "$B" "${S[@]}" --spec-guard banana
expect_usage "serve --spec-policy banana" "dsflash serve: --spec-policy: expected measured or fixed, got 'banana'" "$B" "${S[@]}" --spec-policy banana
expect_usage "serve --max-num-seqs x" "dsflash serve: --max-num-seqs: expected an integer in [1, 4096], got 'x'" "$B" "${S[@]}" --max-num-seqs x
expect_usage "serve --max-num-seqs=0" "dsflash serve: --max-num-seqs: expected an integer in [1, 4096], got '0'" "$B" "${S[@]}" --max-num-seqs=0
expect_usage "serve --max-num-seq (abbreviation)" "dsflash serve: --max-num-seq: unknown option (long options must match exactly)" "$B" "${S[@]}" --max-num-seq 4
expect_usage "serve --kv-cache-memory 4Gx" \
    "dsflash serve: --kv-cache-memory: expected a size of at least 1 byte (suffixes K, M, G, T, KiB.., KB..), got '4Gx'" "$B" "${S[@]}" --kv-cache-memory 4Gx
expect_usage "serve --memory-utilization 1.5" "dsflash serve: --memory-utilization: expected a number in (0, 1], got '1.5'" "$B" "${S[@]}" --memory-utilization 1.5
expect_usage "serve --gpu-memory-utilization 0 (alias)" "dsflash serve: --gpu-memory-utilization: expected a number in (0, 1], got '0'" "$B" "${S[@]}" --gpu-memory-utilization 0
expect_usage "serve --numerics fastest" "dsflash serve: --numerics: expected exact or fast, got 'fastest'" "$B" "${S[@]}" --numerics fastest
expect_usage "serve --block-size 48" "dsflash serve: --block-size: expected a power of two in [16, 256], got '48'" "$B" "${S[@]}" --block-size 48
expect_usage "serve --allowed-origins ftp://x" \
    "dsflash serve: --allowed-origins: expected *, none or a comma list of origins such as https://chat.example:8443 (scheme, host, optional port; no path), found 'ftp://x'" "$B" "${S[@]}" --allowed-origins ftp://x
expect_usage "serve --kernels amx" "dsflash serve: --kernels: expected auto, avx512-vnni, avx2 or reference, got 'amx'" "$B" "${S[@]}" --kernels amx
expect_usage "serve --engram-residency mlock" \
    "dsflash serve: --engram-residency: expected page-cache, huge-pages, locked or disk, got 'mlock'" "$B" "${S[@]}" --engram-residency mlock
expect_usage "generate --engram-residency ram" "dsflash generate: --engram-residency: expected page-cache, huge-pages, locked or disk, got 'ram'" \
    "$B" generate --model /nonexistent --prompt-ids 1 --max-tokens 1 --engram-residency ram
expect_usage "perf serve --engram-residency mlock" "dsflash perf serve: --engram-residency: expected page-cache, huge-pages, locked or disk, got 'mlock'" \
    "$B" perf serve --model /nonexistent --engram-residency mlock
expect_usage "serve --default-chat-template-kwargs []" "dsflash serve: --default-chat-template-kwargs: expected a JSON object, got '[]'" "$B" "${S[@]}" --default-chat-template-kwargs '[]'
expect_usage "generate --max-tokens 0" "dsflash generate: --max-tokens: expected an integer in [1, 16777216], got '0'" \
    "$B" generate --model /nonexistent --prompt-ids 1 --max-tokens 0
expect_usage "generate --prompt-ids 1,a" "dsflash generate: --prompt-ids: 'a' at offset 2: expected an integer token id in [0, 2147483647], got '1,a'" \
    "$B" generate --model /nonexistent --prompt-ids 1,a --max-tokens 1
expect_usage "generate --numerics slow" "dsflash generate: --numerics: expected exact or fast, got 'slow'" \
    "$B" generate --model /nonexistent --prompt-ids 1 --max-tokens 1 --numerics slow
expect_usage "perf decode --tokens x" "dsflash perf decode: --tokens: expected an integer in [1, 100000], got 'x'" "$B" perf decode --model /nonexistent --tokens x
expect_usage "perf kernels --tokens 3 (a decode flag)" "dsflash perf kernels: --tokens: unknown option (long options must match exactly)" "$B" perf kernels --tokens 3
expect_usage "perf decode without --model" "dsflash perf decode: --model: required (the checkpoint directory to time)" "$B" perf decode

# --- the KV budget follows MemAvailable -------------------------------------------------------------
printf 'MemTotal:       25165824 kB\nMemFree:          524288 kB\nMemAvailable:    4194304 kB\n' > "$OUT/meminfo"
if DSFLASH_MEMINFO=$OUT/meminfo start_server "$OUT/serve.log" --numerics exact; then
    line=$(grep '^\[selfcheck\] memory: OK' "$OUT/serve.log")
    curl -s "$BASE/server_info" > "$OUT/info.json"
    if /usr/bin/python3 - "$OUT/info.json" "$line" <<'EOP'
import json, sys
info = json.load(open(sys.argv[1])); line = sys.argv[2]
cfg = json.load(open(info["model_dir"] + "/config.json"))["text_config"]
act = int(1.5 * 8192 * (cfg["vocab_size"] * 4 + 64 * cfg["hidden_size"] * 4))
want = 4194304 * 1024 - info["weights_mapped_bytes"] - act - 2 * 2**30
assert info["activation_reservation_bytes"] == act, (info["activation_reservation_bytes"], act)
assert info["kv_budget_bytes"] == want, (info["kv_budget_bytes"], want)
assert info["numerics"] == "exact" and info["flags"]["numerics"] == "exact"
assert f"KV budget {want} B = min(" in line and "MemAvailable 4294967296 B" in line, line
EOP
    then ok "KV budget = MemAvailable - mapped weights - reservations, stated in the capacity line; --numerics exact echoed"
    else bad "KV budget from MemAvailable" "$line"; fi
else bad "server with a fake meminfo did not start"; fi
stop_server
mapped_page_cache=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["weights_mapped_bytes"])' "$OUT/info.json" 2>/dev/null)

# --- --engram-residency huge-pages: the copy is refused without room, else served from and echoed ------
printf 'MemTotal:       25165824 kB\nMemFree:             64 kB\nMemAvailable:         64 kB\n' > "$OUT/meminfo_low"
DSFLASH_MEMINFO=$OUT/meminfo_low timeout 120 "$B" serve --model-cache "$MODEL_CACHE" --port 1 --engram-residency huge-pages \
    > "$OUT/low.log" 2>&1; rc=$?
if [ $rc != 0 ] && grep -q "E_ENGRAM_RESIDENCY: engram residency huge-pages: the tables need [0-9]* B of anonymous memory, MemAvailable is 65536 B" "$OUT/low.log"
then ok "huge-pages with less MemAvailable than the tables: the load fails naming both (exit $rc)"
else bad "huge-pages without room" "exit $rc: $(grep -m1 E_ "$OUT/low.log")"; fi
if grep -q '\[never\]' /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null; then
    timeout 120 "$B" serve --model-cache "$MODEL_CACHE" --port 1 --engram-residency huge-pages > "$OUT/never.log" 2>&1; rc=$?
    if [ $rc != 0 ] && grep -q "transparent_hugepage/enabled: expected always or madvise, found never" "$OUT/never.log"
    then ok "huge-pages on a host whose transparent huge pages are never: refused (exit $rc)"
    else bad "huge-pages refused where THP is never" "exit $rc"; fi
# the same tier as the server above: the mapped bytes a tier still reads differ (the fast tier's float
# copies give their published pages back, the exact tier reads them in place)
elif DSFLASH_MEMINFO=$OUT/meminfo start_server "$OUT/serve_huge.log" --engram-residency huge-pages --numerics exact; then
    curl -s "$BASE/server_info" > "$OUT/info_huge.json"
    if grep -q '^\[selfcheck\] engram residency: OK huge-pages, resident share 100.0%, 100.0% of 4096 random pages per table (mincore)$' "$OUT/serve_huge.log" &&
       /usr/bin/python3 - "$OUT/info_huge.json" "$mapped_page_cache" <<'EOP'
import json, sys, glob, os
info = json.load(open(sys.argv[1])); before = int(sys.argv[2])
tables = sum(os.path.getsize(f) for f in glob.glob(info["model_dir"] + "/engram_int8/*.safetensors"))
assert info["engram_residency"] == "huge-pages" and info["flags"]["engram-residency"] == "huge-pages"
# the tables' data moved from mapped to repacked: mapped drops by the files less their headers
assert 0 < before - info["weights_mapped_bytes"] < tables, (before, info["weights_mapped_bytes"], tables)
EOP
    then ok "huge-pages: tables 100% resident by the §13 sample, echoed in /server_info, their bytes no longer counted as mapped"
    else bad "huge-pages server" "$(grep -m1 'engram residency' "$OUT/serve_huge.log")"; fi
else bad "server with --engram-residency huge-pages did not start"; fi
stop_server

# --- --engram-residency locked: an mlock the limit refuses fails naming it (root: without CAP_IPC_LOCK) ---
tiny=$(dirname "$(ls "$MODEL_CACHE"/*/config.json | head -1)")
# --- generate --prompt TEXT: the prompt, ids and text of --prompt-file holding the same text ---
printf 'hello world, twice: hello world' > "$OUT/prompt.txt"
"$B" generate --model "$tiny" --prompt 'hello world, twice: hello world' --max-tokens 4 --threads 1 > "$OUT/gen_text.out" 2>&1; rc1=$?
"$B" generate --model "$tiny" --prompt-file "$OUT/prompt.txt" --max-tokens 4 --threads 1 > "$OUT/gen_file.out" 2>&1; rc2=$?
if [ $rc1 = 0 ] && [ $rc2 = 0 ] && grep -q '^generated: [0-9]' "$OUT/gen_text.out" &&
   [ "$(grep -E '^(prompt|generated|text):' "$OUT/gen_text.out")" = "$(grep -E '^(prompt|generated|text):' "$OUT/gen_file.out")" ]
then ok "generate --prompt TEXT: the same prompt, ids and text as --prompt-file"
else bad "generate --prompt TEXT" "exit $rc1/$rc2: $(grep -m1 -E '^(generated|dsflash)' "$OUT/gen_text.out")"; fi
"$B" generate --model "$tiny" --prompt x --prompt-ids 5 --max-tokens 1 > "$OUT/gen_two.out" 2>&1; rc=$?
if [ $rc = 2 ] && grep -q 'exactly one of --prompt-ids / --prompt / --prompt-file are required' "$OUT/gen_two.out"
then ok "generate with --prompt and --prompt-ids: refused (exit 2)"
else bad "generate --prompt with --prompt-ids" "exit $rc: $(head -1 "$OUT/gen_two.out")"; fi
# --- dsflash --version: the release the server reports on GET /version (src/server/http_endpoints.c) ---
v=$("$B" --version); rc=$?
"$B" version extra > /dev/null 2>&1; rc_extra=$?
if [ $rc = 0 ] && [[ "$v" =~ ^dsflash\ [0-9]+\.[0-9]+\.[0-9]+$ ]] && [ $rc_extra = 2 ]
then ok "dsflash --version prints '$v' (exit 0); an extra argument is refused (exit 2)"
else bad "dsflash --version" "exit $rc: '$v'"; fi
drop=(); [ "$(id -u)" = 0 ] && drop=(setpriv --bounding-set -ipc_lock)
(ulimit -l 0; exec "${drop[@]}" "$B" generate --model "$tiny" --prompt-ids 5,6,7 --max-tokens 1 --threads 1 \
    --engram-residency locked) > "$OUT/lock.log" 2>&1; rc=$?
if [ $rc != 0 ] && grep -q "E_ENGRAM_RESIDENCY: engram residency locked: .*engram_embed.weight.safetensors: layers.1.engram.embed.weight: mlock of [0-9]* B failed: .*(RLIMIT_MEMLOCK 0 B; raise it" "$OUT/lock.log"
then ok "locked under a zero memlock limit: the load fails naming file, tensor, bytes and the limit (exit $rc)"
else bad "locked under a zero memlock limit" "exit $rc: $(tail -1 "$OUT/lock.log")"; fi
timeout 120 "$B" generate --model "$tiny" --prompt-ids 5,6,7 --max-tokens 1 --threads 1 --engram-residency locked > "$OUT/lock2.log" 2>&1; rc=$?
if [ $rc = 0 ] && grep -q "engram residency locked: 2 tables" "$OUT/lock2.log"; then ok "locked within the limit: loads and generates"
elif [ $rc != 0 ] && grep -q "RLIMIT_MEMLOCK" "$OUT/lock2.log"; then ok "locked: this host's memlock limit refuses the tables, named (exit $rc)"
else bad "locked within the limit" "exit $rc: $(tail -1 "$OUT/lock2.log")"; fi

# --- --numa-nodes: a node the host lacks and a malformed list fail naming the flag; node 0 runs pinned ---
"$B" generate --model "$tiny" --prompt-ids 5,6,7 --max-tokens 1 --numa-nodes 4095 > "$OUT/numa1.log" 2>&1; rc=$?
if [ $rc != 0 ] && grep -q "E_ARG: --numa-nodes: node 4095 is not online on this host (online nodes: " "$OUT/numa1.log"
then ok "--numa-nodes 4095: refused, naming the nodes online (exit $rc)"
else bad "--numa-nodes 4095" "exit $rc: $(tail -1 "$OUT/numa1.log")"; fi
"$B" generate --model "$tiny" --prompt-ids 5,6,7 --max-tokens 1 --numa-nodes 0-1 > "$OUT/numa2.log" 2>&1; rc=$?
if [ $rc != 0 ] && grep -q "E_ARG: --numa-nodes: .*expected all or a comma list of node ids .*got '0-1'" "$OUT/numa2.log"
then ok "--numa-nodes 0-1: refused, saying what is expected (exit $rc)"
else bad "--numa-nodes 0-1" "exit $rc: $(tail -1 "$OUT/numa2.log")"; fi
"$B" generate --model "$tiny" --prompt-ids 5,6,7 --max-tokens 2 --numa-nodes 0 > "$OUT/numa3.log" 2>&1; rc=$?
cores=$(for c in $(taskset -cp $$ | sed 's/.*: //' | tr ',' '\n' | while IFS=- read a b; do seq "$a" "${b:-$a}"; done); do
          cat /sys/devices/system/cpu/cpu$c/topology/thread_siblings_list 2>/dev/null || echo "lone$c"; done | sort -u | wc -l)
if [ -e /sys/devices/system/node/node0/cpulist ]; then
    if [ $rc = 0 ] && grep -q "numa: nodes 0: $cores threads on CPUs .*($cores physical cores, one worker pinned per core), memory bound to the node" "$OUT/numa3.log"
    then ok "--numa-nodes 0: generates with $cores pinned threads, memory bound to node 0"
    else bad "--numa-nodes 0" "exit $rc: $(grep -m1 numa "$OUT/numa3.log")"; fi
elif [ $rc != 0 ] && grep -q "this host shows no NUMA topology" "$OUT/numa3.log"; then ok "--numa-nodes 0 on a host without sysfs nodes: refused, named"
else bad "--numa-nodes 0 without sysfs nodes" "exit $rc: $(tail -1 "$OUT/numa3.log")"; fi
# --- serve --allowed-origins LIST: a listed origin is echoed (with Vary: Origin), another gets no
# CORS header, and its preflight no Allow-Methods; --allowed-origins none sends none ---
if start_server "$OUT/serve_cors.log" --allowed-origins https://a.example,http://localhost:3000; then
    h1=$(curl -s -D - -o /dev/null -H "Origin: http://localhost:3000" "$BASE/v1/models" | tr -d '\r')
    h2=$(curl -s -D - -o /dev/null -H "Origin: https://b.example" "$BASE/v1/models" | tr -d '\r')
    h3=$(curl -s -D - -o /dev/null -X OPTIONS -H "Origin: https://b.example" -H "Access-Control-Request-Method: POST" "$BASE/v1/completions" | tr -d '\r')
    if grep -qx "Access-Control-Allow-Origin: http://localhost:3000" <<<"$h1" && grep -qx "Vary: Origin" <<<"$h1" &&
       ! grep -qi "^Access-Control-Allow-Origin" <<<"$h2" && grep -q "^HTTP/1.1 204" <<<"$h3" && ! grep -qi "^Access-Control-Allow-Methods" <<<"$h3"
    then ok "--allowed-origins list: the listed origin echoed with Vary, another origin and its preflight get no CORS grant"
    else bad "--allowed-origins list" "$(grep -i 'access-control\|^HTTP' <<<"$h1$h2$h3" | tr '\n' ' ')"; fi
else bad "server with --allowed-origins did not start"; fi
stop_server
if start_server "$OUT/serve_nocors.log" --allowed-origins none; then
    h=$(curl -s -D - -o /dev/null -H "Origin: http://localhost:3000" "$BASE/v1/models" | tr -d '\r')
    if ! grep -qi "^Access-Control" <<<"$h" && grep -q "^HTTP/1.1 200" <<<"$h"; then ok "--allowed-origins none: no CORS header"
    else bad "--allowed-origins none" "$(grep -i 'access-control' <<<"$h")"; fi
else bad "server with --allowed-origins none did not start"; fi
stop_server
# --- serve --numa-nodes 0: /server_info echoes the nodes, the resolved thread count and the pinning;
# the memory plan takes node 0's MemTotal (sysfs), and the capacity line names the nodes ---
if [ -e /sys/devices/system/node/node0/meminfo ]; then
    if start_server "$OUT/serve_numa.log" --numa-nodes 0; then
        curl -s "$BASE/server_info" > "$OUT/info_numa.json"
        node_kb=$(awk '/MemTotal:/ {print $4}' /sys/devices/system/node/node0/meminfo)
        if grep -q "KV budget .*(/proc/meminfo and NUMA nodes 0)" "$OUT/serve_numa.log" &&
           /usr/bin/python3 - "$OUT/info_numa.json" "$node_kb" "$cores" <<'EOP'
import json, sys
info = json.load(open(sys.argv[1])); kb = int(sys.argv[2]); cores = int(sys.argv[3])
assert info["numa_nodes"] == "0" and info["threads_pinned"] is True and info["flags"]["numa-nodes"] == "0", info
assert info["threads"] == cores, (info["threads"], cores)
assert info["mem_total_bytes"] == kb * 1024, (info["mem_total_bytes"], kb)
EOP
        then ok "serve --numa-nodes 0: /server_info echoes node 0 and $cores pinned threads; the memory plan counts node 0's MemTotal"
        else bad "serve --numa-nodes 0" "$(grep -m1 'KV budget' "$OUT/serve_numa.log")"; fi
    else bad "server with --numa-nodes 0 did not start"; fi
    stop_server
fi
rm -rf "$OUT"
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
