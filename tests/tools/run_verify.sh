#!/usr/bin/env bash
# Suite for `dsflash verify` (TOOLS.md §2) on the tiny release written by `dsflash mkmodel`, plus the
# end-to-end reassembly of its split Engram tables.  Every fault fixture is a copy of the good
# checkpoint with one deliberate defect, edited by tests/tools/st_edit.py (an independent reader of
# the safetensors header) or by plain file tools; each asserts the exit class and that the report
# names the defect under the right check id.
cd "$(dirname "$0")"
. ./lib.sh
PY=/usr/bin/python3
ED="$PY $PWD/st_edit.py"
ROOT=$DS_TEST_TMP/verify.$$
rm -rf "$ROOT"; mkdir -p "$ROOT"
BASE=$ROOT/base
if ! "$B" mkmodel --config tiny --out "$BASE" --quiet > "$ROOT/mkmodel.log" 2>&1; then
    bad "mkmodel --config tiny" "$(tail -5 "$ROOT/mkmodel.log")"
    finish; exit 1
fi
# A copy has new inodes, so the .verified stamps of the reassembled Engram tables no longer match
# (by design: a stamp vouches for one file); re-stamping is the user's step too: reassemble.
fresh() {
    C=$ROOT/$1; rm -rf "$C"; cp -a "$BASE" "$C"; LOG=$ROOT/$1.log
    "$B" reassemble "$C/engram_int8" --quiet > "$ROOT/$1.restamp.log" 2>&1 || bad "re-stamp the copy $1" "$(cat "$ROOT/$1.restamp.log")"
}
shard_of() { $PY -c "import json,sys; print(json.load(open('$1/quant_model_weights.safetensors.index.json'))['weight_map']['$2'])"; }
# row "ID STATUS" present in the report
row() { grep -qE "^  $2 +$3 " "$1"; }

# --- a good checkpoint -------------------------------------------------------------------------
fresh good
"$B" verify "$C" --json-out "$ROOT/good.json" > "$LOG" 2>&1; expect_rc "tiny release verifies" 0 $? "$LOG"
check "summary line PASS" grep -qE "^verify: PASS \(checks [0-9]+, warnings 0\)$" "$LOG"
for id in F1 C1 LOAD I1 H1 N1 L1 S1 R1 E1; do check "$id passes" row "$LOG" $id PASS; done
check "JSON result has schema, checks, counts and summary" $PY - "$ROOT/good.json" "$C" <<'EOP'
import json, sys
j = json.load(open(sys.argv[1]))
wm = json.load(open(sys.argv[2] + "/quant_model_weights.safetensors.index.json"))["weight_map"]
assert j["schema"] == "dsflash-verify/1" and j["summary"]["status"] == "PASS"
assert [c["id"] for c in j["checks"]][:3] == ["F1", "C1", "LOAD"]
assert all(c["status"] == "PASS" for c in j["checks"])
assert j["counts"]["tensors"] >= len(wm) and sum(j["counts"]["by_label"].values()) == j["counts"]["tensors"]
assert j["counts"]["bytes"] > 0 and "I8" in j["counts"]["by_dtype"]
EOP
"$B" verify "$C" --deep > "$LOG" 2>&1; expect_rc "--deep on the good checkpoint" 0 $? "$LOG"
check "D1 passes" row "$LOG" D1 PASS
"$B" verify "$C" --profile v41-flash-w4a8 > "$LOG" 2>&1; expect_rc "tiny under the forced V4.1 release profile" 1 $? "$LOG"
check "profile: C1 names max_position_embeddings" grep -q "C1    FAIL .*max_position_embeddings: expected 1048576" "$LOG"
check "profile: N1 quotes 185,734" grep -q "N1    FAIL .*185,734" "$LOG"
check "profile: E1 quotes the published file size" grep -q "E1    FAIL .*98305579120" "$LOG"

# --- split Engram tables: NEED, reassemble, delete parts --------------------------------------------
fresh need
E=$C/engram_int8
check "fixture ships PARTS.sha256 and parts" bash -c "[ -s '$E/PARTS.sha256' ] && ls '$E' | grep -q 'part-00-of'"
targets=$(grep -v '^#' "$E/PARTS.sha256" | grep -v '\.part-' | awk '{print $2}')
ntargets=$(echo "$targets" | wc -w)
for t in $targets; do cp "$E/$t" "$ROOT/$t.orig"; rm -f "$E/$t" "$E/$t.verified"; done
"$B" verify "$C" > "$LOG" 2>&1; expect_rc "tables present only as parts" 10 $? "$LOG"
check "F1 says NEED reassembly" grep -q "F1    NEED .*present only as split parts: NEED reassembly" "$LOG"
check "the rest still verified (LOAD passes)" row "$LOG" LOAD PASS
check "summary says NEED" grep -q "^verify: NEED" "$LOG"
"$B" reassemble "$E" --check-only > "$LOG" 2>&1; expect_rc "reassemble --check-only on the fixture" 10 $? "$LOG"
check "check-only: every target needs work" grep -q "^reassemble: $ntargets targets need reassembly" "$LOG"
"$B" reassemble --dir "$E" > "$LOG" 2>&1; expect_rc "reassemble the fixture's tables" 0 $? "$LOG"
same=1; for t in $targets; do cmp -s "$E/$t" "$ROOT/$t.orig" || same=0; done
check "reassembled tables equal mkmodel's" [ $same = 1 ]
"$B" verify "$C" --deep > "$LOG" 2>&1; expect_rc "verify after reassembly" 0 $? "$LOG"
"$B" reassemble "$E" --delete-parts --quiet > "$LOG" 2>&1; expect_rc "--delete-parts" 0 $? "$LOG"
check "no parts left" bash -c "! ls '$E' | grep -q '\.part-'"
"$B" verify "$C" > "$LOG" 2>&1; expect_rc "verify after --delete-parts" 0 $? "$LOG"
# a table next to its parts but without a matching stamp: the loader refuses it
fresh stale
t1=$(grep -v '^#' "$C/engram_int8/PARTS.sha256" | grep -v '\.part-' | awk 'NR==1 {print $2}')
rm -f "$C/engram_int8/$t1.verified"
"$B" verify "$C" > "$LOG" 2>&1; expect_rc "table beside parts without a stamp" 1 $? "$LOG"
check "F1 warns, LOAD fails with E_ENGRAM_PARTS_NOT_REASSEMBLED" bash -c "grep -q 'F1    WARN' '$LOG' && grep -q 'LOAD  FAIL .*E_ENGRAM_PARTS_NOT_REASSEMBLED' '$LOG'"
"$B" reassemble "$C/engram_int8" --quiet > /dev/null 2>&1
"$B" verify "$C" > "$LOG" 2>&1; expect_rc "reassemble re-hashes and stamps it" 0 $? "$LOG"

# --- a copied model directory (cp -r): refused with the exact command, which then works ----------
C=$ROOT/copied; rm -rf "$C"; cp -r "$BASE" "$C"; LOG=$ROOT/copied.log
"$B" verify "$C" > "$LOG" 2>&1; expect_rc "cp -r copy before re-stamping" 1 $? "$LOG"
check "LOAD names the exact command with the directory" grep -qF "run \`dsflash reassemble $C\`" "$LOG"
cmdline=$(grep -oE "run \`dsflash reassemble [^\`]*\`" "$LOG" | head -1 | sed -e 's/^run `dsflash //' -e 's/`$//')
"$B" $cmdline > "$ROOT/copied.restamp.log" 2>&1; expect_rc "the named command (reassemble MODEL_DIR) succeeds" 0 $? "$ROOT/copied.restamp.log"
check "it found the tables under engram_int8/" grep -q "^reassemble: all [1-9][0-9]* targets passed$" "$ROOT/copied.restamp.log"
"$B" verify "$C" > "$LOG" 2>&1; expect_rc "the copy verifies after the named command" 0 $? "$LOG"
"$B" reassemble "$C" --target no-such-table > "$LOG" 2>&1; expect_rc "MODEL_DIR with an unlisted --target" 5 $? "$LOG"
check "unlisted target named" grep -q "no-such-table: not listed in any PARTS.sha256 under $C" "$LOG"

# --- NaN weights: 4 KiB of 0xFF inside a BF16 tensor, an Inf scale ------------------------------------
fresh nanweights
# the first BF16 tensor (by name) of at least 5 KiB, and the byte offset of its element 500, read from
# the index and the header (independent of the C reader)
read -r s tn off < <($PY - "$C" <<'EOP'
import json, struct, sys
d = sys.argv[1]
wm = json.load(open(d + "/quant_model_weights.safetensors.index.json"))["weight_map"]
for name in sorted(wm):
    f = open(d + "/" + wm[name], "rb"); n = struct.unpack("<Q", f.read(8))[0]; t = json.loads(f.read(n))[name]
    if t["dtype"] == "BF16" and t["data_offsets"][1] - t["data_offsets"][0] >= 1000 + 4096:
        print(wm[name], name, 8 + n + t["data_offsets"][0] + 1000); break
EOP
)
head -c 4096 /dev/zero | tr '\0' '\377' | dd of="$C/$s" bs=4096 seek="$off" oflag=seek_bytes conv=notrunc status=none
"$B" verify "$C" --deep > "$LOG" 2>&1; expect_rc "--deep on 4 KiB of 0xFF in a BF16 weight ($tn)" 1 $? "$LOG"
check "D1 names file, tensor and first element (500) and counts 2048" grep -q "D1    FAIL .*$s: $tn (BF16) element 500 is not finite (2048 non-finite of" "$LOG"
"$B" verify "$C" > "$LOG" 2>&1; expect_rc "without --deep the values are not read (structure only)" 0 $? "$LOG"
timeout 300 "$B" serve "$C" --host 127.0.0.1 --port 0 --self-check quick --kv-cache-memory 64MiB > "$LOG" 2>&1
expect_rc "serve refuses the NaN weights at its warm-up probe" 1 $? "$LOG"
check "serve points at the command that names the tensor" grep -qF "\`dsflash verify $C --deep\` names the file, tensor and element" "$LOG"
fresh infscale
s=$(shard_of "$C" layers.0.attn.wq_a.weight_scale)
$ED set "$C/$s" layers.0.attn.wq_a.weight_scale 7 inf
"$B" verify "$C" --deep > "$LOG" 2>&1; expect_rc "--deep on an Inf scale" 1 $? "$LOG"
check "D1 names the scale's file, tensor and element 7" grep -q "D1    FAIL .*$s: layers.0.attn.wq_a.weight_scale (F32) element 7 is not finite (1 non-finite of" "$LOG"
fresh nanengram
$ED set "$C/engram_extra.safetensors" layers.1.engram.wkv.weight 3 nan
"$B" verify "$C" --deep > "$LOG" 2>&1; expect_rc "--deep on a NaN in an auxiliary file" 1 $? "$LOG"
check "D1 names engram_extra.safetensors" grep -q "D1    FAIL .*engram_extra.safetensors: layers.1.engram.wkv.weight (BF16) element 3 is not finite" "$LOG"

# --- file-level faults -------------------------------------------------------------------------------
fresh notok
rm "$C/tokenizer.json"
"$B" verify "$C" > "$LOG" 2>&1; expect_rc "missing tokenizer.json" 1 $? "$LOG"
check "F1 names it" grep -q "F1    FAIL .*tokenizer.json is missing" "$LOG"

fresh dangling
s=$(shard_of "$C" layers.0.attn.wq_a.weight)
rm "$C/$s"; ln -s "$C/gone/$s" "$C/$s"
"$B" verify "$C" > "$LOG" 2>&1; expect_rc "dangling shard link" 1 $? "$LOG"
check "F1 reports the dangling link and its chain" grep -q "F1    FAIL .*$s is a dangling symbolic link: .* (missing)" "$LOG"

fresh modeltype
$PY -c "import json; p='$C/config.json'; j=json.load(open(p)); j['model_type']='deepseek_v3'; json.dump(j, open(p,'w'))"
"$B" verify "$C" > "$LOG" 2>&1; expect_rc "wrong model_type" 1 $? "$LOG"
check "C1 names model_type" grep -q 'C1    FAIL .*model_type: expected "deepseek_v41", found deepseek_v3' "$LOG"

fresh indexmiss
$PY -c "import json; p='$C/quant_model_weights.safetensors.index.json'; j=json.load(open(p)); j['weight_map']['norm.weight']='quant_model_weights-00099-of-00099.safetensors'; json.dump(j, open(p,'w'))"
"$B" verify "$C" > "$LOG" 2>&1; expect_rc "index entry pointing at a missing file" 1 $? "$LOG"
check "I1 names the entry" grep -q "I1    FAIL .*weight_map\[norm.weight\] -> quant_model_weights-00099-of-00099.safetensors: file missing" "$LOG"
check "LOAD reports E_INDEX_TARGET_MISSING" grep -q "LOAD  FAIL .*E_INDEX_TARGET_MISSING" "$LOG"

fresh indexwrong
other=$(ls "$C" | grep '^quant_model_weights-.*safetensors$' | grep -v "$(shard_of "$C" norm.weight)" | head -1)
$PY -c "import json; p='$C/quant_model_weights.safetensors.index.json'; j=json.load(open(p)); j['weight_map']['norm.weight']='$other'; json.dump(j, open(p,'w'))"
"$B" verify "$C" > "$LOG" 2>&1; expect_rc "index entry pointing at a file without the tensor" 1 $? "$LOG"
check "I1 says the header does not hold it" grep -q "I1    FAIL .*norm.weight is mapped to $other but that file's header does not hold it" "$LOG"

fresh unref
cp "$C/$(shard_of "$C" norm.weight)" "$C/quant_model_weights-00099-of-00099.safetensors"
"$B" verify "$C" > "$LOG" 2>&1; expect_rc "an unreferenced shard is only a warning" 0 $? "$LOG"
check "I1 warns about it" grep -q "I1    WARN .*quant_model_weights-00099-of-00099.safetensors is not referenced by the index" "$LOG"
check "summary counts the warning" grep -qE "^verify: PASS \(checks [0-9]+, warnings [1-9]" "$LOG"

fresh truncated
s=$(shard_of "$C" layers.0.attn.wq_a.weight)
truncate -s -100 "$C/$s"
"$B" verify "$C" > "$LOG" 2>&1; expect_rc "truncated shard" 1 $? "$LOG"
check "H1 fails" row "$LOG" H1 FAIL
check "LOAD reports E_SHARD_TRUNCATED" grep -q "LOAD  FAIL .*E_SHARD_TRUNCATED" "$LOG"

fresh trailing
s=$(shard_of "$C" layers.0.attn.wq_a.weight)
head -c 16 /dev/zero >> "$C/$s"
"$B" verify "$C" > "$LOG" 2>&1; expect_rc "trailing bytes after the data" 1 $? "$LOG"
check "H1 gives the expected size" grep -q "H1    FAIL .*$s: file size [0-9]*, expected 8 + header" "$LOG"

fresh descver
$PY -c "import json; p='$C/quant_model_description.json'; j=json.load(open(p)); j['version']='2.0.0'; json.dump(j, open(p,'w'))"
"$B" verify "$C" > "$LOG" 2>&1; expect_rc "description version" 1 $? "$LOG"
check "L1 names version" grep -q 'L1    FAIL .*version: expected "1.0.0"' "$LOG"

fresh label
$PY -c "import json; p='$C/quant_model_description.json'; j=json.load(open(p)); j['layers.0.ffn.experts.0.w1.weight']='W8A8_DYNAMIC'; json.dump(j, open(p,'w'))"
"$B" verify "$C" > "$LOG" 2>&1; expect_rc "expert weight labelled W8A8" 1 $? "$LOG"
check "L1 names the sibling disagreement or the plan" grep -q "L1    FAIL .*layers.0.ffn.experts.0.w1.weight" "$LOG"

fresh shape
# rewrite the header of the shard holding gate.bias so its shape disagrees with the config
s=$(shard_of "$C" layers.0.ffn.gate.bias)
$PY - "$C/$s" <<'EOP'
import json, struct, sys
p = sys.argv[1]
d = open(p, "rb").read()
n = struct.unpack("<Q", d[:8])[0]
h = json.loads(d[8:8 + n])
t = h["layers.0.ffn.gate.bias"]
t["shape"] = [t["shape"][0] // 2, 2]
txt = json.dumps(h, separators=(",", ":")).encode()
assert len(txt) <= n
open(p, "wb").write(d[:8] + txt + b" " * (n - len(txt)) + d[8 + n:])
EOP
"$B" verify "$C" > "$LOG" 2>&1; expect_rc "gate.bias with another shape" 1 $? "$LOG"
check "S1 names the shape" grep -q "S1    FAIL .*layers.0.ffn.gate.bias: shape \[[0-9]*, 2\], expected \[[0-9]*\]" "$LOG"
check "LOAD reports E_SHAPE_MISMATCH" grep -q "LOAD  FAIL .*E_SHAPE_MISMATCH" "$LOG"

# --- value faults ---------------------------------------------------------------------------------
fresh rotation
$ED set "$C/optional/quarot.safetensors" global_rotation 40 0.5
"$B" verify "$C" > "$LOG" 2>&1; expect_rc "rotation with a value outside the diagonal blocks" 1 $? "$LOG"
check "R1 counts it" grep -q "R1    FAIL .*global_rotation: 1 non-zero values outside the 32x32 diagonal blocks" "$LOG"

fresh offset
s=$(shard_of "$C" layers.0.attn.wq_a.weight_offset)
$ED set "$C/$s" layers.0.attn.wq_a.weight_offset 3 0.25
"$B" verify "$C" --deep --samples 100000 > "$LOG" 2>&1; expect_rc "non-zero weight_offset" 1 $? "$LOG"
check "D1 names the offset" grep -q "D1    FAIL .*layers.0.attn.wq_a.weight_offset\[3\] = 0.25" "$LOG"
check "LOAD reports E_OFFSET_NONZERO" grep -q "LOAD  FAIL .*E_OFFSET_NONZERO" "$LOG"

fresh escale
f=$C/$(shard_of "$C" layers.1.engram.embed.scale)
$ED set "$f" layers.1.engram.embed.scale 17 3.0
"$B" verify "$C" --deep --samples 100000 > "$LOG" 2>&1; expect_rc "Engram scale that is not a power of two" 1 $? "$LOG"
# tiny rows have engram_head_dim 32, i.e. one scale group: element 17 is row 17, group 0
check "D1 names row 17 group 0" grep -q "D1    FAIL .*layers.1.engram.embed.scale row 17 group 0: scale 3 is not a positive power of two" "$LOG"
check "LOAD reports E_ENGRAM_SCALE" grep -q "LOAD  FAIL .*E_ENGRAM_SCALE" "$LOG"

fresh ecode
f=$C/$(shard_of "$C" layers.2.engram.embed.weight)
$ED set "$f" layers.2.engram.embed.weight 70 -128
"$B" verify "$C" --deep --samples 100000 > "$LOG" 2>&1; expect_rc "Engram code -128" 1 $? "$LOG"
check "D1 names the code (element 70 = row 2 of 32 codes)" grep -q "D1    FAIL .*layers.2.engram.embed.weight row 2: code -128 outside \[-127, 127\]" "$LOG"

fresh scalebias
s=$(shard_of "$C" layers.0.ffn.experts.0.w2.scale_bias)
v=$($ED get "$C/$s" layers.0.ffn.experts.0.w2.scale_bias 0)
$ED set "$C/$s" layers.0.ffn.experts.0.w2.scale_bias 0 "$($PY -c "print($v * 1.5 + 1.0)")"
"$B" verify "$C" --deep --samples 100000 > "$LOG" 2>&1; expect_rc "inconsistent scale_bias is a warning only" 0 $? "$LOG"
check "D1 warns about the scale_bias relation" grep -q "D1    WARN .*layers.0.ffn.experts.0.w2.scale_bias\[[0-9]*\]\[0\] = .*expected 8\*s\*sum(q)" "$LOG"

# --- --compare ------------------------------------------------------------------------------------------
fresh cmp1
s=$(shard_of "$C" layers.0.attn.wq_a.weight)
v=$($ED get "$C/$s" layers.0.attn.wq_a.weight 5)
nv=$(( v < 127 ? v + 1 : v - 1 ))
$ED set "$C/$s" layers.0.attn.wq_a.weight 5 $nv
"$B" verify "$BASE" --compare "$C" > "$LOG" 2>&1; expect_rc "int8 code off by one is within tolerance" 0 $? "$LOG"
check "X1 reports exactly one differing tensor" grep -q "X1    PASS .* 1 differ (.*), 0 over tolerance" "$LOG"
nv=$(( v < 100 ? v + 3 : v - 3 ))
$ED set "$C/$s" layers.0.attn.wq_a.weight 5 $nv
"$B" verify "$BASE" --compare "$C" > "$LOG" 2>&1; expect_rc "int8 code off by three" 1 $? "$LOG"
check "X1 names the tensor and element" grep -q "X1    FAIL .*layers.0.attn.wq_a.weight: codes differ by 3 at element 5" "$LOG"
fresh cmp2
s=$(shard_of "$C" layers.0.ffn.experts.0.w1.weight)
$ED nibble "$C/$s" layers.0.ffn.experts.0.w1.weight 9 1
$ED nibble "$C/$s" layers.0.ffn.experts.0.w1.weight 9 -1 >/dev/null 2>&1 || true
$ED nibble "$C/$s" layers.0.ffn.experts.0.w1.weight 11 -3
"$B" verify "$BASE" --compare "$C" > "$LOG" 2>&1; expect_rc "int4 code moved by three" 1 $? "$LOG"
check "X1 compares unpacked int4 codes" grep -q "X1    FAIL .*layers.0.ffn.experts.0.w1.weight: codes differ by [23] at element 11" "$LOG"
fresh cmp3
s=$(shard_of "$C" layers.0.attn_norm.weight)
v=$($ED get "$C/$s" layers.0.attn_norm.weight 0)
$ED set "$C/$s" layers.0.attn_norm.weight 0 "$($PY -c "print($v * 1.05)")"
"$B" verify "$BASE" --compare "$C" > "$LOG" 2>&1; expect_rc "float value 5% off" 1 $? "$LOG"
check "X1 quotes the relative limit" grep -q "X1    FAIL .*layers.0.attn_norm.weight: element 0 is .* (relative limit 2e-3)" "$LOG"
if "$B" mkmodel --config tiny --seed 7 --out "$ROOT/seed7" --quiet --no-verify > /dev/null 2>&1; then
    "$B" verify "$BASE" --compare "$ROOT/seed7" > "$LOG" 2>&1; expect_rc "another seed differs everywhere" 1 $? "$LOG"
    check "X1 reports the fraction of differing tensors" grep -q "X1    FAIL .*common tensors, [0-9]* differ ([0-9.]*%)" "$LOG"
else
    bad "mkmodel --seed 7"
fi

# --- usage -----------------------------------------------------------------------------------------
"$B" verify > "$LOG" 2>&1; expect_rc "no DIR" 2 $? "$LOG"
"$B" verify "$BASE" --sample 3 > "$LOG" 2>&1; expect_rc "abbreviated option" 2 $? "$LOG"
"$B" verify "$BASE" --profile v4 > "$LOG" 2>&1; expect_rc "unknown profile" 2 $? "$LOG"
"$B" verify "$BASE" --samples 0 > "$LOG" 2>&1; expect_rc "--samples 0" 2 $? "$LOG"
"$B" verify "$ROOT/nowhere" > "$LOG" 2>&1; expect_rc "DIR missing" 5 $? "$LOG"
"$B" verify-checkpoint "$BASE" > "$LOG" 2>&1; expect_rc "verify-checkpoint is an alias" 0 $? "$LOG"

[ $FAIL = 0 ] && rm -rf "$ROOT"
finish
