#!/usr/bin/env bash
# DSpark speculative decoding on real and random models (MODEL.md §4, SERVING.md §8).
#
# 1. The trained fixture (tests/data/trained-tiny, a float release) goes through `dsflash quantize`
#    into the W4A8 release, draft included (int8 Engram tables in the source, no bias_vl).
# 2. Held-out perplexity of that release, exact tier, windows 0–1 (256 tokens from position 0): NLL
#    within 0.1 of the reference code's 6.934 on the same windows (uniform would be 11.77).
# 3. `dsflash eval acceptance` on it: greedy speculative decoding with 5 drafts must give token ids
#    and logit rows bit-identical to plain decoding (the command exits 1 otherwise), and the draft
#    must actually be accepted: mean acceptance length A > 1.5 on the model's own greedy
#    continuation (reference 2.22), A >= 1 on the held-out text.
# 3b. The NumPy oracle's draft (tests/oracle/draft.py) on the trained release: every draft pass of
#    a speculative run — proposals, draft logits, confidences — bit-identical (compare_draft.py).
# 3c. `dsflash perf decode --num-speculative-tokens 5` on it: identity, and an A above 1 printed.
# 4. The same identity on a random tiny model (mkmodel tiny: random draft, almost nothing accepted).
# 5. A rotated release without its un-rotated draft vocabulary: loading with the draft required
#    fails with E_DRAFT_VOCAB_MISSING (CHECKPOINT.md §11), and so does `perf decode --num-speculative-tokens`.
#
# Env: DSFLASH_BIN, DS_TEST_TMP, BUILD.  Ends with "N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
PY=/usr/bin/python3
BIN=${DSFLASH_BIN:-$PWD/build/${BUILD:-release}/dsflash}
TMP=${DS_TEST_TMP:-$(mktemp -d)}/spec
DATA=tests/data/trained-tiny
rm -rf "$TMP"
mkdir -p "$TMP"
pass=0
fail=0
ok() { echo "PASS $*"; pass=$((pass + 1)); }
ko() { echo "FAIL $*"; fail=$((fail + 1)); }
check() { local what=$1; shift; if "$@"; then ok "$what"; else ko "$what"; fi; }

# ---- 1. the trained fixture, quantized
SRC="$TMP/tt_float"
mkdir -p "$SRC"
cp "$DATA/config.json" "$DATA/tokenizer_config.json" "$SRC/"
for f in model.safetensors tokenizer.json engram_token_map.u32; do gunzip -c "$DATA/$f.gz" > "$SRC/$f"; done
gunzip -c "$DATA/heldout.u32.gz" > "$TMP/heldout.u32"
if "$BIN" quantize --src "$SRC" --dst "$TMP/tt_w4a8" --quiet > "$TMP/quantize.log" 2>&1; then
    ok "quantize the trained float release into W4A8"
else
    ko "quantize the trained float release into W4A8: $(tail -3 "$TMP/quantize.log")"
fi
check "the release has the draft manifest and mtpq shards" test -f "$TMP/tt_w4a8/mtpq_manifest.json"

# ---- 2. perplexity, windows 0-1
"$BIN" eval perplexity --model "$TMP/tt_w4a8" --tokens "$TMP/heldout.u32" --max-windows 2 > "$TMP/ppl.log" 2>&1
nll=$(sed -n 's/^perplexity: NLL \([0-9.]*\),.*/\1/p' "$TMP/ppl.log")
echo "  held-out NLL windows 0-1 (exact tier, W4A8): ${nll:-none} (reference float 6.934)"
check "held-out NLL within 0.1 of the reference" "$PY" -c "import sys; sys.exit(0 if abs(float('${nll:-99}') - 6.934) < 0.1 else 1)"
# the same windows placed on node 0 (pinned workers, bound memory): the same NLL to the last digit
if [ -e /sys/devices/system/node/node0/cpulist ]; then
    "$BIN" eval perplexity --model "$TMP/tt_w4a8" --tokens "$TMP/heldout.u32" --max-windows 2 --numa-nodes 0 > "$TMP/ppl_numa.log" 2>&1
    nll0=$(sed -n 's/^perplexity: NLL \([0-9.]*\),.*/\1/p' "$TMP/ppl_numa.log")
    check "eval --numa-nodes 0: placed on node 0, NLL ${nll0:-none} equals the unplaced run's" \
        sh -c "grep -q 'numa: nodes 0: .*memory bound to the node' '$TMP/ppl_numa.log' && [ -n '$nll0' ] && [ '$nll0' = '$nll' ]"
fi
"$BIN" eval perplexity --model "$TMP/tt_w4a8" --tokens "$TMP/heldout.u32" --numa-nodes 4095 > "$TMP/ppl_numa_bad.log" 2>&1
check "eval --numa-nodes 4095: refused, naming the flag and the nodes online" \
    sh -c "! grep -q '^perplexity:' '$TMP/ppl_numa_bad.log' && grep -q -- '--numa-nodes: node 4095 is not online' '$TMP/ppl_numa_bad.log'"

# ---- 3. acceptance and identity on the trained fixture
if "$BIN" eval acceptance --model "$TMP/tt_w4a8" --tokens "$TMP/heldout.u32" --starts 48,160 --steps 32 > "$TMP/acc.log" 2>&1; then
    ok "trained: speculative greedy decoding is bit-identical to plain decoding (tokens and logit rows)"
else
    ko "trained: eval acceptance: $(grep -E 'identity|dsflash' "$TMP/acc.log" | tail -2)"
fi
grep -E '^(acceptance|decode|identity)' "$TMP/acc.log" | sed 's/^/  /'
ag=$(sed -n 's/^acceptance greedy *: steps [0-9]*, A \([0-9.]*\),.*/\1/p' "$TMP/acc.log")
at=$(sed -n 's/^acceptance text *: steps [0-9]*, A \([0-9.]*\),.*/\1/p' "$TMP/acc.log")
check "trained: A > 1.5 on the greedy continuation (found ${ag:-none})" "$PY" -c "import sys; sys.exit(0 if float('${ag:-0}') > 1.5 else 1)"
check "trained: A >= 1 on held-out text (found ${at:-none})" "$PY" -c "import sys; sys.exit(0 if float('${at:-0}') >= 1.0 else 1)"

# ---- 3b. the oracle's draft passes on the trained release
if "$PY" tests/oracle/compare_draft.py --bin "$BIN" --model "$TMP/tt_w4a8" --tmp "$TMP/draft_oracle" --prompt-len 48 --steps 12 \
    --label trained > "$TMP/draft_oracle.log" 2>&1; then
    ok "trained: every draft pass equals the NumPy oracle's (proposals, draft logits, confidences)"
else
    ko "trained: draft vs oracle: $(grep -E 'FAIL|Error|error' "$TMP/draft_oracle.log" | head -3)"
fi
grep -E 'draft passes' "$TMP/draft_oracle.log" | sed 's/^/  /'

# ---- 3c. `perf decode` speculation rows on the trained release (identity checked by the command)
if "$BIN" perf decode --model "$TMP/tt_w4a8" --threads 1 --prompt-tokens 48 --tokens 32 --num-speculative-tokens 5 \
    > "$TMP/bench.log" 2>&1; then
    ok "perf decode --num-speculative-tokens 5: speculative greedy tokens equal plain ones"
else
    ko "perf decode --num-speculative-tokens 5: $(grep -E 'identity|dsflash' "$TMP/bench.log" | tail -2)"
fi
grep -E '^\| (acceptance length|per-position|decode, spec|verify step|draft pass|the same in processor|linears)' "$TMP/bench.log" | sed 's/^/  /'
ab=$(sed -n 's/^| acceptance length A (own greedy continuation) | \([0-9.]*\) |$/\1/p' "$TMP/bench.log")
check "perf decode prints A > 1 on the trained release (found ${ab:-none})" "$PY" -c "import sys; sys.exit(0 if float('${ab:-0}') > 1.0 else 1)"
# the floors: a verify step of 6 rows reads every weight a 1-row step does and multiplies more, so its
# floor is at least the decode step's
vf=$(sed -n 's/^| linears. floor: decode step \/ verify step \/ draft pass .* ms: verify \([0-9.]*\), draft \([0-9.]*\) of a decode step; .*/\1/p' "$TMP/bench.log")
check "perf decode prints the linears' floors, verify >= 1 decode step (found ${vf:-none})" "$PY" -c "import sys; sys.exit(0 if float('${vf:-0}') >= 1.0 else 1)"

# ---- 4. identity on a random tiny model
if "$BIN" mkmodel --config tiny --seed 3 --no-split --out "$TMP/tiny" --quiet > "$TMP/mk.log" 2>&1; then
    "$PY" -c "import numpy as np; np.random.default_rng(11).integers(3, 1000, 600).astype('<u4').tofile('$TMP/rand.u32')"
    if "$BIN" eval acceptance --model "$TMP/tiny" --tokens "$TMP/rand.u32" --starts 20,157 --steps 40 > "$TMP/acc_tiny.log" 2>&1; then
        ok "random tiny: speculative greedy decoding is bit-identical to plain decoding"
    else
        ko "random tiny: eval acceptance: $(tail -2 "$TMP/acc_tiny.log")"
    fi
    grep -E '^(acceptance|identity)' "$TMP/acc_tiny.log" | sed 's/^/  /'
else
    ko "mkmodel --config tiny: $(tail -2 "$TMP/mk.log")"
fi

# ---- 5. rotated release without the draft vocabulary
if [ -f "$TMP/tiny/optional/quarot.safetensors" ]; then
    cp -r "$TMP/tiny" "$TMP/tiny_novocab"
    # rename the draft vocabulary tensors in their shard headers (same length: offsets unchanged)
    "$PY" - "$TMP/tiny_novocab" <<'PYEOF'
import glob, json, struct, sys
ix = sys.argv[1] + "/quant_model_weights.safetensors.index.json"
j = json.load(open(ix))
for k in ("mtp.0.embed.weight", "mtp.2.head.weight"):
    j["weight_map"].pop(k, None)
json.dump(j, open(ix, "w"))
for p in glob.glob(sys.argv[1] + "/mtpq-*.safetensors"):
    with open(p, "r+b") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = f.read(n)
        h2 = h.replace(b'"mtp.0.embed.weight"', b'"mtp.0.embex.weight"').replace(b'"mtp.2.head.weight"', b'"mtp.2.heax.weight"')
        f.seek(8)
        f.write(h2)
PYEOF
    "$BIN" eval acceptance --model "$TMP/tiny_novocab" --tokens "$TMP/rand.u32" --starts 20 --steps 2 > "$TMP/novocab.log" 2>&1
    rc=$?
    if [ $rc != 0 ] && grep -q E_DRAFT_VOCAB_MISSING "$TMP/novocab.log"; then
        ok "rotated release without draft vocabulary: the required draft fails to load (E_DRAFT_VOCAB_MISSING)"
    else
        ko "rotated release without draft vocabulary: expected E_DRAFT_VOCAB_MISSING, found exit $rc: $(tail -1 "$TMP/novocab.log")"
    fi
    "$BIN" perf decode --model "$TMP/tiny_novocab" --tokens 2 --num-speculative-tokens 5 > "$TMP/bench_nodraft.log" 2>&1
    rc=$?
    if [ $rc != 0 ] && grep -q E_DRAFT_VOCAB_MISSING "$TMP/bench_nodraft.log"; then
        ok "perf decode --num-speculative-tokens without a usable draft is refused (exit $rc, E_DRAFT_VOCAB_MISSING)"
    else
        ko "perf decode --num-speculative-tokens without a usable draft: expected E_DRAFT_VOCAB_MISSING, found exit $rc: $(tail -1 "$TMP/bench_nodraft.log")"
    fi
else
    ko "mkmodel tiny wrote no rotation file: the rotated-release check cannot run"
fi

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
