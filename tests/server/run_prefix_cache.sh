#!/usr/bin/env bash
# Live-server check of prefix caching (issue: repeated prompts reported cached_tokens 0): every
# prompt is sent twice through /v1/completions as token ids; the first send must hit nothing and
# the repeat must hit every full block SERVING.md §7.2 allows, ((P-1) div 128) * 128 tokens, at
# lengths from one block up to max-model-len (4096 on the tiny model).  /metrics must then count
# exactly the tokens queried and hit.  The expected figures come from the §7.2 formula, not from
# the server.
set -u
cd "$(dirname "$0")/../.."
. tests/server/serve_lib.sh
pass=0; fail=0
PY=/usr/bin/python3
if start_server "$DS_TEST_TMP/serve-prefix.log" --kv-cache-memory 256MiB; then
    out=$("$PY" - "$BASE" <<'EOP'
import json, sys, urllib.request
base = sys.argv[1]
def post(ids):
    body = {"model": "deepseek-v41", "prompt": ids, "max_tokens": 4, "temperature": 0}
    req = urllib.request.Request(base + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    u = json.load(urllib.request.urlopen(req, timeout=300))["usage"]
    return (u.get("prompt_tokens_details") or {}).get("cached_tokens", 0), u["prompt_tokens"]
hits = queried = 0
for k, n in enumerate([130, 300, 1000, 2000, 3000, 4090]):
    # a distinct first token per prompt: hashes chain, so prompts share nothing (§7.1)
    ids = [3 + k] + [3 + (i * 7919 + 13 * k) % 250 for i in range(1, n)]
    (h1, p1), (h2, p2) = post(ids), post(ids)
    want = (n - 1) // 128 * 128
    print(("ok" if (h1, h2, p1, p2) == (0, want, n, n) else "FAIL") +
          f" prompt {n}: first send hit {h1}, repeat hit {h2} (expected 0 and {want})")
    hits += want; queried += 2 * n
m = urllib.request.urlopen(base + "/metrics", timeout=30).read().decode()
val = {l.split()[0]: float(l.split()[1]) for l in m.splitlines() if l and not l.startswith("#")}
got = (val.get("dsflash_prefix_cache_hits_total"), val.get("dsflash_prefix_cache_queries_total"))
print(("ok" if got == (hits, queried) else "FAIL") +
      f" /metrics: {got[0]} hits for {got[1]} queried tokens (expected {hits} for {queried})")
EOP
)
    echo "$out"
    pass=$((pass + $(echo "$out" | grep -c '^ok')))
    fail=$((fail + $(echo "$out" | grep -c '^FAIL')))
    [ -z "$out" ] && fail=$((fail + 1))
else fail=$((fail + 1)); fi
stop_server
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
