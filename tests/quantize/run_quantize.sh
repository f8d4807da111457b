#!/usr/bin/env bash
# `dsflash mkmodel` and `dsflash quantize` end to end on the tiny configuration (MODEL.md §8,
# TOOLS.md §3).  Oracles: tests/quantize/quant_oracle.py re-quantizes every tensor with NumPy and
# checks the layout; tests/quantize/float_vs_quant.py runs the NumPy model (tests/oracle) on the float
# and the quantized checkpoint; the structural verifier and the loader are the engine's own.
# Ends with "N passed, N failed".
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
: "${DSFLASH_BIN:=$ROOT/build/${BUILD:-release}/dsflash}"
: "${DS_TEST_TMP:=$(mktemp -d)}"
B=$DSFLASH_BIN
PY=/usr/bin/python3
export SOURCE_DATE_EPOCH=1700000000      # manifests carry a timestamp: make two runs comparable
W="$DS_TEST_TMP/quantize.$$"
rm -rf "$W"; mkdir -p "$W"; cd "$W" || exit 1
PASS=0; FAIL=0
ok()  { PASS=$((PASS + 1)); echo "ok   $1"; }
bad() { FAIL=$((FAIL + 1)); echo "FAIL $1"; [ -n "${2:-}" ] && sed 's/^/     | /' <<< "$2" | head -25; return 0; }
run() { local log=$1; shift; "$@" > "$log" 2>&1; echo $?; }
# every file of a directory (except reassemble's machine-local .verified stamps) with its sha256
tree_sums() { (cd "$1" && find . -type f ! -name '*.verified' | LC_ALL=C sort | xargs sha256sum); }

# ---- 1. a tiny release and its float model
rc=$(run mk.log "$B" mkmodel --config tiny --out rel --float-out flt)
if [ "$rc" = 0 ] && grep -q 'mkmodel verify: 3 prompt(s), logits finite' mk.log; then
    ok "mkmodel tiny writes a release that loads and runs ($(grep -o 'logit std [0-9.e+-]*\.\.[0-9.e+-]*' mk.log))"
else bad "mkmodel tiny (exit $rc)" "$(cat mk.log)"; fi
n_trunk=$(ls rel/quant_model_weights-*-of-*.safetensors 2>/dev/null | wc -l)
n_parts=$(ls rel/engram_int8/*.part-*-of-* 2>/dev/null | wc -l)
if [ "$n_trunk" -ge 2 ] && [ "$n_parts" -ge 2 ] && [ -f rel/engram_int8/PARTS.sha256 ] && [ -f rel/mtpq_manifest.json ] \
   && [ -f rel/optional/quarot.safetensors ] && [ -f rel/tokenizer.json ] && [ -f rel/engram_token_map.bin ]; then
    ok "release layout: $n_trunk trunk shards, $n_parts Engram parts + PARTS.sha256, mtpq manifest, rotation, tokenizer, token map"
else bad "release layout" "$(cd rel && find . -type f | sort)"; fi
out=$($PY "$HERE/quant_oracle.py" --float flt --release rel 2>&1)
if [ $? = 0 ]; then ok "every tensor equals the NumPy re-quantization ($(grep -o 'checked .*' <<< "$out"))"
else bad "NumPy quantization oracle" "$out"; fi
out=$("$B" verify rel --deep 2>&1)
if [ $? = 0 ]; then ok "dsflash verify --deep passes on the release"; else bad "dsflash verify --deep" "$out"; fi

# ---- 2. quantize of the float model reproduces the release byte for byte
mv rel relA
rc=$(run q.log "$B" quantize --src flt --dst rel --shard-size 1MiB --split-engram 64KiB --quiet)
if [ "$rc" = 0 ] && diff <(tree_sums relA) <(tree_sums rel) > diff.log; then
    ok "quantize(float-out) == mkmodel release: sha256 of all $(tree_sums rel | wc -l) files identical"
else bad "quantize reproduces the release (exit $rc)" "$(cat q.log diff.log)"; fi
rc=$(run q1.log "$B" quantize --src flt --dst rel_t1 --shard-size 1MiB --threads 1 --quiet)
rc2=$(run q2.log "$B" quantize --src flt --dst rel_t2 --shard-size 1MiB --threads 2 --quiet)
same=1
for f in $(cd rel_t1 && find . -name '*.safetensors' -o -name '*index.json' -o -name 'quant_model_description.json' | sort); do
    cmp -s "rel_t1/$f" "rel_t2/$f" && cmp -s "rel_t1/$f" "relA/$f" || { same=0; echo "differs: $f"; }
done > thr.log
if [ "$rc$rc2" = 00 ] && [ "$same" = 1 ]; then ok "--threads 1 and 2 give identical tensor files, index and description"
else bad "thread-count determinism (exit $rc/$rc2)" "$(cat thr.log q1.log q2.log)"; fi

# ---- 3. the quantized checkpoint loads and runs; its logits against the float model's
toks=$(seq -s, 3 66)
rc=$(run gen.log "$B" generate --model rel --prompt-ids "$toks" --max-tokens 1 --trace tr.st --numerics exact)
out=$($PY "$HERE/float_vs_quant.py" --float flt --release rel --view view --trace tr.st 2>&1)
if [ "$rc" = 0 ] && [ $? = 0 ] && grep -q 'C engine on the quantized release' <<< "$out"; then
    ok "quantized release runs in the engine; $(grep -o 'quantized vs float model.*' <<< "$out"); $(grep -o 'C engine.*' <<< "$out")"
else bad "quantized vs float logits (generate exit $rc)" "$out $(cat gen.log)"; fi

# ---- 4. decisive fixture, and the QuaRot folds: rotated and un-rotated float models agree
rc=$(run sm.log "$B" mkmodel --config tiny --smooth --out smooth/rel --float-out smooth/flt)
if [ "$rc" = 0 ] && grep -q 'decisive fixture' sm.log; then ok "mkmodel --smooth: $(grep -o 'router .*' sm.log | sed 's/ \[decisive fixture\]//')"
else bad "mkmodel --smooth (exit $rc)" "$(cat sm.log)"; fi
rc=$(run smi.log "$B" mkmodel --config tiny --smooth --rotation identity --out smooth_id/rel --float-out smooth_id/flt --no-verify)
out=$($PY "$HERE/float_vs_quant.py" --float smooth/flt --release smooth/rel --float2 smooth_id/flt --release2 smooth_id/rel --view view2 2>&1)
if [ "$rc" = 0 ] && [ $? = 0 ]; then ok "$(grep -o 'rotated vs un-rotated.*' <<< "$out")"
else bad "rotation folds preserve the model (mkmodel exit $rc)" "$out $(cat smi.log)"; fi
if ! cmp -s smooth/rel/engram_int8/layers_1_engram_embed.weight.safetensors smooth_id/rel/engram_int8/layers_1_engram_embed.weight.safetensors ||
   cmp -s smooth/rel/quant_model_weights-00001-of-*.safetensors smooth_id/rel/quant_model_weights-00001-of-*.safetensors; then
    bad "rotation changes the trunk but not the Engram tables"
else ok "rotation changes the trunk shards, not the Engram tables"; fi

# ---- 5. destination rules, resume, bad input
before=$(ls rel | wc -l)
rc=$(run ne.log "$B" quantize --src flt --dst relA --no-resume)
if [ "$rc" = 2 ] && grep -q 'expected an empty destination' ne.log && diff <(tree_sums relA) <(tree_sums rel) > /dev/null; then
    ok "non-empty destination without resume is refused and left untouched (exit 2)"
else bad "non-empty destination (exit $rc)" "$(cat ne.log)"; fi
rm rel/quant_model_weights-00003-of-*.safetensors
f2=$(ls rel/quant_model_weights-00002-of-*.safetensors)
truncate -s 1000 "$f2"
rc=$(run res.log "$B" quantize --src flt --dst rel --shard-size 1MiB --split-engram 64KiB)
if [ "$rc" = 0 ] && grep -q 'resuming' res.log && grep -qE '\(1[0-9] already complete\)' res.log && diff <(tree_sums relA) <(tree_sums rel) > /dev/null; then
    ok "resume after a lost and a truncated shard: $(grep -oE '[0-9]+ tensor files \([0-9]+ already complete\)' res.log), result identical"
else bad "resume (exit $rc)" "$(cat res.log)"; fi
rc=$(run pl.log "$B" quantize --src flt --dst rel --shard-size 2MiB --quiet)
if [ "$rc" = 2 ] && [ "$(ls rel | wc -l)" = "$before" ]; then ok "resume with a different plan is refused (exit 2)"
else bad "different plan into an existing release (exit $rc)" "$(cat pl.log)"; fi
rc=$(run u1.log "$B" quantize --src flt --dst x1 --bogus); rc2=$(run u2.log "$B" quantize --sr flt --dst x2)
rc3=$(run u3.log "$B" quantize --src flt); rc4=$(run u4.log "$B" mkmodel --config tiny --out x3 --sed 3)
if [ "$rc$rc2$rc3$rc4" = 2222 ] && grep -q usage u2.log && [ ! -e x1 ] && [ ! -e x2 ] && [ ! -e x3 ]; then
    ok "unknown, abbreviated or incomplete options: usage, exit 2, nothing written"
else bad "option errors ($rc $rc2 $rc3 $rc4)" "$(cat u1.log u2.log u3.log u4.log)"; fi
rc=$(run m.log "$B" quantize --src nowhere --dst x4)
if [ "$rc" = 5 ] && grep -q 'nowhere' m.log && [ ! -e x4 ]; then ok "missing source: exit 5 naming it"
else bad "missing source (exit $rc)" "$(cat m.log)"; fi
rc=$(run qs.log "$B" quantize --src relA --dst x5)
if [ "$rc" = 1 ] && grep -q 'E_SRC_FORMAT' qs.log && [ ! -e x5/quant_model_weights.safetensors.index.json ]; then
    ok "an already quantized source is refused (E_SRC_FORMAT, exit 1)"
else bad "quantized source (exit $rc)" "$(cat qs.log)"; fi
# a NaN in one source tensor: the run fails naming it and publishes no index
cp -r flt flt_nan
$PY - flt_nan <<'EOF'
import json, os, struct, sys
d = sys.argv[1]
wm = json.load(open(os.path.join(d, "model.safetensors.index.json")))["weight_map"]
name = "layers.3.ffn.experts.5.w1.weight"
p = os.path.join(d, wm[name])
with open(p, "r+b") as fh:
    n = struct.unpack("<Q", fh.read(8))[0]
    h = json.loads(fh.read(n))
    fh.seek(8 + n + h[name]["data_offsets"][0] + 2 * 77)
    fh.write(struct.pack("<H", 0x7FC0))        # bf16 quiet NaN
EOF
rc=$(run nan.log "$B" quantize --src flt_nan --dst x6 --shard-size 1MiB)
if [ "$rc" = 1 ] && grep -q 'layers.3.ffn.experts.5.w1.weight' nan.log && grep -q E_SRC_NONFINITE nan.log \
   && [ ! -e x6/quant_model_weights.safetensors.index.json ] && [ -z "$(find x6 -name '*.partial')" ]; then
    ok "NaN in the source: exit 1 naming the tensor, no index, no partial file"
else bad "NaN source (exit $rc)" "$(cat nan.log)"; fi
# source missing a required tensor; rotated source without the un-rotated draft vocabulary
drop() { # drop DIR NAME...: remove names from the float index
    $PY - "$@" <<'EOF'
import json, os, sys
d, names = sys.argv[1], sys.argv[2:]
p = os.path.join(d, "model.safetensors.index.json")
j = json.load(open(p))
for n in names:
    del j["weight_map"][n]
json.dump(j, open(p, "w"))
EOF
}
cp -r flt flt_miss; drop flt_miss layers.4.attn.indexer.wk.weight
rc=$(run miss.log "$B" quantize --src flt_miss --dst x7)
cp -r flt flt_vocab; drop flt_vocab mtp.0.embed.weight
rc2=$(run voc.log "$B" quantize --src flt_vocab --dst x8)
if [ "$rc$rc2" = 11 ] && grep -q 'E_TENSOR_MISSING.*layers.4.attn.indexer.wk.weight' miss.log && grep -q E_DRAFT_VOCAB_MISSING voc.log; then
    ok "missing tensor (E_TENSOR_MISSING) and rotated source without draft vocabulary (E_DRAFT_VOCAB_MISSING): exit 1"
else bad "incomplete sources (exit $rc/$rc2)" "$(cat miss.log voc.log)"; fi
# an official-style source: the ratio-2 compressor in BF16 is widened to the release's F32
cp -r flt flt_bf16
$PY - flt_bf16 "$ROOT/tests/oracle" <<'EOF'
import json, os, sys
import numpy as np
d = sys.argv[1]; sys.path.insert(0, sys.argv[2])
import safetensors_np as st
p = os.path.join(d, "model.safetensors.index.json")
j = json.load(open(p))
name = "layers.2.attn.compressor.wkv.weight"
f = st.SafeTensorsFile(os.path.join(d, j["weight_map"][name]))
w = np.asarray(f.get(name), dtype=np.float32)
bits = (w.view(np.uint32) >> 16).astype(np.uint16)         # truncated to BF16: the values of this file
st.write(os.path.join(d, "extra-bf16.safetensors"), {name: ("BF16", bits)})
j["weight_map"][name] = "extra-bf16.safetensors"
json.dump(j, open(p, "w"))
EOF
rc=$(run bf.log "$B" quantize --src flt_bf16 --dst rel_bf16)
got=$($PY - rel_bf16 flt_bf16 "$ROOT/tests/oracle" <<'EOF'
import json, os, sys
import numpy as np
sys.path.insert(0, sys.argv[3])
import safetensors_np as st
name = "layers.2.attn.compressor.wkv.weight"
r = json.load(open(os.path.join(sys.argv[1], "quant_model_weights.safetensors.index.json")))["weight_map"][name]
f = st.SafeTensorsFile(os.path.join(sys.argv[1], r))
src = st.SafeTensorsFile(os.path.join(sys.argv[2], "extra-bf16.safetensors")).get(name)
want = (np.asarray(src, dtype=np.uint32) << 16).view(np.float32)
print(f.info(name).dtype, bool(np.array_equal(np.asarray(f.get(name), dtype=np.float32), want)))
EOF
)
if [ "$rc" = 0 ] && grep -q 'converted to the dtype the release requires' bf.log && [ "$got" = "F32 True" ] && "$B" verify rel_bf16 > /dev/null 2>&1; then
    ok "a BF16 ratio-2 compressor is widened exactly to the release's F32 (reported), verify passes"
else bad "dtype conversion (exit $rc, '$got')" "$(cat bf.log)"; fi
# an un-rotated source without draft vocabulary: identity rotation written, embed/head copied
cp -r smooth_id/flt flt_plain; rm -r flt_plain/optional; drop flt_plain mtp.0.embed.weight mtp.2.head.weight
rc=$(run pl2.log "$B" quantize --src flt_plain --dst rel_plain --quiet)
out=$($PY "$HERE/quant_oracle.py" --float flt_plain --release rel_plain 2>&1)
if [ "$rc" = 0 ] && [ $? = 0 ] && [ -f rel_plain/optional/quarot.safetensors ] && "$B" verify rel_plain > /dev/null 2>&1; then
    ok "un-rotated source: identity rotation file, draft vocabulary copied from embed/head, verify passes"
else bad "un-rotated source (exit $rc)" "$out $(cat pl2.log)"; fi

# ---- 6. the official FP8/MXFP4 format as input (CHECKPOINT.md §14), against its exact decoding
out=$($PY "$HERE/make_fp8_source.py" --float smooth_id/flt --out fp8 --decoded fp8_dec 2>&1)
rc=$(run f8.log "$B" quantize --src-format fp8 --src fp8 --dst rel_fp8 --quiet)
out2=$($PY "$HERE/quant_oracle.py" --float fp8_dec --release rel_fp8 2>&1)
if [ "$rc" = 0 ] && [ $? = 0 ] && "$B" verify rel_fp8 > f8v.log 2>&1 && "$B" generate --model rel_fp8 --prompt-ids 5,6,7 --max-tokens 2 > f8g.log 2>&1; then
    ok "--src-format fp8: $(grep -o '[0-9]* encoded weights' <<< "$out") decoded exactly; release equals the NumPy re-quantization, verifies and runs"
else bad "FP8 source (exit $rc)" "$out $out2 $(cat f8.log f8v.log)"; fi
rc=$(run f8b.log "$B" quantize --src fp8 --dst x9)
if [ "$rc" = 1 ] && grep -q 'src-format fp8' f8b.log; then ok "an FP8 source without --src-format fp8 is refused with a hint (exit 1)"
else bad "FP8 source as bf16 (exit $rc)" "$(cat f8b.log)"; fi

# ---- 7. options: minmax search, dry run, aggressive draft plan, split-only + reassemble
rc=$(run mm.log "$B" quantize --src flt --dst rel_mm --int4-search minmax --quiet)
out=$($PY "$HERE/quant_oracle.py" --float flt --release rel_mm --ssz-steps 1 2>&1)
if [ "$rc" = 0 ] && [ $? = 0 ]; then ok "--int4-search minmax matches the NumPy r = 1 quantizer"; else bad "minmax" "$out"; fi
rc=$(run dr.log "$B" quantize --src flt --dst rel_dry --dry-run)
if [ "$rc" = 0 ] && grep -q 'plan:' dr.log && [ ! -e rel_dry ]; then ok "--dry-run prints the plan and writes nothing"
else bad "dry run (exit $rc)" "$(cat dr.log)"; fi
rc=$(run ag.log "$B" quantize --src flt --dst rel_ag --plan aggressive --quant-main-proj --quiet)
lab=$($PY -c "import json; d=json.load(open('rel_ag/quant_model_description.json')); print(d['mtp.1.attn.wo_a.weight'], d['mtp.0.main_proj.weight_scale'], d['layers.1.attn.wo_a.weight'])" 2>&1)
if [ "$rc" = 0 ] && [ "$lab" = "W8A8_DYNAMIC W8A8_DYNAMIC FLOAT" ] && "$B" verify rel_ag > ag_v.log 2>&1; then
    ok "--plan aggressive --quant-main-proj: draft wo_a/main_proj W8A8, trunk wo_a FLOAT, verify passes"
else bad "aggressive plan (exit $rc, labels '$lab')" "$(cat ag.log ag_v.log)"; fi
rc=$(run so.log "$B" mkmodel --config tiny --out rel_so --split-only)
rc2=$(run ra.log "$B" reassemble --dir rel_so/engram_int8 --quiet)
rc3=$(run so_g.log "$B" generate --model rel_so --prompt-ids 5,6,7 --max-tokens 2)
if [ "$rc$rc2$rc3" = 000 ] && [ ! -e relA/engram_int8/missing ] && cmp -s rel_so/engram_int8/layers_2_engram_embed.weight.safetensors relA/engram_int8/layers_2_engram_embed.weight.safetensors; then
    ok "--split-only: parts only; dsflash reassemble rebuilds the table byte for byte and the model loads"
else bad "split-only (exit $rc/$rc2/$rc3)" "$(cat so.log ra.log so_g.log)"; fi
rc=$(run ne_.log "$B" quantize --src flt --dst rel_split --shard-size 1MiB --split-engram 64KiB --no-engram)
idx1=$([ -e rel_split/quant_model_weights.safetensors.index.json ] && echo yes || echo no)
rc2=$(run eo.log "$B" quantize --src flt --dst rel_split --shard-size 1MiB --split-engram 64KiB --engram-only)
if [ "$rc$rc2" = 00 ] && [ "$idx1" = no ] && grep -q 'no index written' ne_.log && $PY "$HERE/same_release.py" relA rel_split > ne_d.log 2>&1; then
    ok "--no-engram then --engram-only: no index after the first run, identical release after the second"
else bad "--no-engram / --engram-only (exit $rc/$rc2, index after first: $idx1)" "$(cat ne_.log eo.log ne_d.log)"; fi
# a config file instead of the preset gives the same model
rc=$(run cf.log "$B" mkmodel --config relA/config.json --out rel_cfg --float-out flt_cfg --shard-size 1MiB --split-engram 64KiB --no-verify --quiet)
if [ "$rc" = 0 ] && diff <(cd relA && find . -name '*.safetensors' | LC_ALL=C sort | xargs sha256sum) \
                         <(cd rel_cfg && find . -name '*.safetensors' | LC_ALL=C sort | xargs sha256sum) > /dev/null; then
    ok "mkmodel --config FILE.json (the tiny release's config) reproduces the tiny tensors"
else bad "mkmodel --config FILE (exit $rc)" "$(cat cf.log)"; fi
rc=$(run ne2.log "$B" mkmodel --config tiny --out relA)
if [ "$rc" = 2 ]; then ok "mkmodel refuses a non-empty --out (exit 2)"; else bad "mkmodel into non-empty dir (exit $rc)" "$(cat ne2.log)"; fi

cd "$DS_TEST_TMP" && rm -rf "$W"
echo "$PASS passed, $FAIL failed"
[ "$FAIL" = 0 ]
