#!/usr/bin/env bash
# The official FP8/MXFP4 layout (CHECKPOINT.md §14), end to end:
#  - `mkmodel --format official` writes the layout (names, dtypes, scale shapes, config fields
#    checked here by a reader independent of the engine: Python's json/struct);
#  - `verify` passes it;
#  - the exact tier is bit-identical to the NumPy oracle on the decisive tiny fixture (compare.py:
#    per-layer hidden states and logits, greedy tokens), with the scalar and the auto kernel paths;
#  - the fast tier gives the same tokens on every kernel path this CPU runs;
#  - `quantize --src-format fp8` of it agrees with the direct load within the quantizer's error;
#  - damaged scales / weights, truncated shards and mismatched block shapes are refused naming the
#    file and tensor, by both `generate` and `verify` (exit != 0, no crash).
# Env: DSFLASH_BIN, DS_TEST_TMP.  Ends with "N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
PY=/usr/bin/python3
BIN=${DSFLASH_BIN:-$PWD/build/${BUILD:-release}/dsflash}
TMP=${DS_TEST_TMP:-$(mktemp -d)}/fp8
rm -rf "$TMP"; mkdir -p "$TMP"
pass=0; fail=0
ok() { echo "ok   $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1"; fail=$((fail + 1)); }
check() { if eval "$2"; then ok "$1"; else bad "$1"; fi; }

# a Python part with its own "N passed, N failed" line
part() {
    local log="$TMP/part.log" line
    "$@" >"$log" 2>&1
    local rc=$?
    cat "$log"
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$log" | tail -1)
    if [ -z "$line" ]; then bad "$*: no result line (exit $rc)"; return; fi
    pass=$((pass + ${line%% *})); local f=${line#*, }; fail=$((fail + ${f%% *}))
    if [ "$rc" != 0 ] && [ "${f%% *}" = 0 ]; then bad "$*: exit $rc"; fi
}

OFF=$TMP/tiny_off
if ! "$BIN" mkmodel --config tiny --format official --smooth --seed 7 --out "$OFF" --quiet; then
    bad "mkmodel --format official"; echo "$pass passed, $fail failed"; exit 1
fi
ok "mkmodel --config tiny --format official --smooth"
check "mkmodel refuses --format official with --rotation" \
    "! '$BIN' mkmodel --config tiny --format official --rotation random --out '$TMP/x' 2>'$TMP/err' && grep -q 'format official' '$TMP/err'"

echo "--- layout (independent reader)"
part "$PY" - "$OFF" <<'PYEOF'
import json, struct, sys, os
d = sys.argv[1]
cfg = json.load(open(os.path.join(d, "config.json")))
wm = json.load(open(os.path.join(d, "model.safetensors.index.json")))["weight_map"]
hdr = {}
for f in sorted(set(wm.values())):
    b = open(os.path.join(d, f), "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    hdr.update({k: v for k, v in json.loads(b[8:8 + n]).items() if k != "__metadata__"})
t = cfg["text_config"]
ok = fail = 0
def chk(name, cond):
    global ok, fail
    print(("ok   " if cond else "FAIL ") + name); ok += cond; fail += not cond
q = cfg.get("quantization_config", {})
chk("config: quantization_config fp8 / ue8m0 / [32, 32] / fp4 experts and flat dtype fields",
    q.get("quant_method") == "fp8" and q.get("scale_fmt") == "ue8m0" and q.get("weight_block_size") == [32, 32]
    and q.get("expert_dtype") == "fp4" and cfg.get("dtype") == "fp8" and cfg.get("expert_dtype") == "fp4")
D, I, Q = t["hidden_size"], t["moe_intermediate_size"], t["q_lora_rank"]
def ceil32(x): return (x + 31) // 32
chk("dense FP8: wq_a F8_E4M3 [q_lora, D] with F8_E8M0 [ceil(q_lora/32), ceil(D/32)]",
    hdr["layers.0.attn.wq_a.weight"]["dtype"] == "F8_E4M3" and hdr["layers.0.attn.wq_a.weight"]["shape"] == [Q, D]
    and hdr["layers.0.attn.wq_a.scale"]["dtype"] == "F8_E8M0" and hdr["layers.0.attn.wq_a.scale"]["shape"] == [ceil32(Q), ceil32(D)])
chk("shared expert and wo_a / wo_b are FP8", all(hdr[f"layers.0.{n}.weight"]["dtype"] == "F8_E4M3"
    for n in ("ffn.shared_experts.w1", "ffn.shared_experts.w2", "attn.wo_a", "attn.wo_b")))
w1, w2 = hdr["layers.0.ffn.experts.3.w1.weight"], hdr["layers.0.ffn.experts.3.w2.weight"]
chk("MXFP4 experts: w1 U8 [I, D/2] + E8M0 [I, D/32]; w2 U8 [D, I/2] + E8M0 [D, I/32]",
    w1["dtype"] in ("U8", "I8") and w1["shape"] == [I, D // 2] and hdr["layers.0.ffn.experts.3.w1.scale"]["shape"] == [I, D // 32]
    and w2["shape"] == [D, I // 2] and hdr["layers.0.ffn.experts.3.w2.scale"]["shape"] == [D, I // 32]
    and hdr["layers.0.ffn.experts.3.w2.scale"]["dtype"] == "F8_E8M0")
hd, L = t["engram_head_dim"], t["engram_layer_ids"][0]
e = hdr[f"layers.{L}.engram.embed.weight"]
chk("Engram rows F8_E4M3 [rows, head_dim] + F8_E8M0 [rows, head_dim/32] in the shards",
    e["dtype"] == "F8_E4M3" and e["shape"] == [t["engram_num_embeddings"][0], hd]
    and hdr[f"layers.{L}.engram.embed.scale"]["shape"] == [t["engram_num_embeddings"][0], hd // 32])
chk("no W4A8-only tensors (weight_scale, weight_offset, scale_bias, rotation) and no draft vocabulary copies",
    not any(k.endswith((".weight_scale", ".weight_offset", ".scale_bias")) for k in hdr) and "global_rotation" not in hdr
    and "mtp.0.embed.weight" not in hdr and f"mtp.{t['num_nextn_predict_layers'] - 1}.head.weight" not in hdr)
chk("float tensors as CHECKPOINT.md section 14 lists them (embed, head, gate, norms, compressor BF16; hc, sinks, gate biases F32)",
    all(hdr[n]["dtype"] == "BF16" for n in ("embed.weight", "head.weight", "layers.0.ffn.gate.weight", "layers.0.attn.q_norm.weight",
                                            "layers.0.attn.kv_norm.weight"))
    and all(v["dtype"] == "BF16" for k, v in hdr.items() if ".attn.compressor." in k)
    and all(v["dtype"] == "F32" for k, v in hdr.items()
            if k.rsplit(".", 1)[-1].startswith("hc_") or k.endswith((".attn_sink", ".gate.bias", ".gate.bias_vl"))))
print(f"{ok} passed, {fail} failed")
PYEOF

echo "--- verify"
"$BIN" verify "$OFF" >"$TMP/verify.log" 2>&1; rc=$?
cat "$TMP/verify.log"
check "verify passes the official layout (rows F1 C1 LOAD I1 H1 N1 O1)" \
    "[ $rc = 0 ] && grep -q '^  O1    PASS' '$TMP/verify.log' && grep -q '^  N1    PASS' '$TMP/verify.log'"

echo "--- exact tier vs the NumPy oracle (decisive fixture)"
part "$PY" tests/oracle/compare.py --bin "$BIN" --numerics exact --model "$OFF" --tmp "$TMP/cmp_ref" \
    --prompt-lens 100,157 --chunks 1,16 --gen 32 --seed 7 --mode decisive --label official
part "$PY" tests/oracle/compare.py --bin "$BIN" --numerics exact --model "$OFF" --tmp "$TMP/cmp_auto" \
    --prompt-lens 157 --chunks 7 --gen 32 --seed 7 --mode decisive --kernels auto --label official-auto

echo "--- --activations e4m3 (the official runtime's E4M3-per-32 activations): exact tier vs the oracle"
part "$PY" tests/oracle/compare.py --bin "$BIN" --numerics exact --model "$OFF" --tmp "$TMP/cmp_e4m3" --activations e4m3 \
    --prompt-lens 100,157 --chunks 1,16 --gen 32 --seed 7 --mode decisive --label official-e4m3
part "$PY" tests/oracle/compare.py --bin "$BIN" --numerics exact --model "$OFF" --tmp "$TMP/cmp_e4m3_auto" --activations e4m3 \
    --prompt-lens 157 --chunks 7 --gen 32 --seed 7 --mode decisive --kernels auto --label official-e4m3-auto
e4ids=5,6,7,8,9,10,11,12
gen_tokens() { "$BIN" generate --model "$OFF" --prompt-ids $e4ids --max-tokens 32 --numerics exact "$@" 2>/dev/null | grep '^generated:'; }
t_int8=$(gen_tokens --activations int8); t_e4m3=$(gen_tokens --activations e4m3)
check "the option acts: e4m3 and int8 activations give different greedy tokens on the decisive fixture" \
    "[ -n '$t_e4m3' ] && [ '$t_int8' != '$t_e4m3' ]"

echo "--- fast tier: every kernel path gives the same tokens"
ids=5,6,7,8,9,10,11,12,13,14,15,16
for act in int8 e4m3; do
    want=""
    for k in reference avx2 avx512-vnni; do
        if ! "$BIN" generate --model "$OFF" --prompt-ids $ids --max-tokens 16 --numerics fast --kernels $k --activations $act \
            >"$TMP/f_$k.log" 2>&1; then
            grep -q "cannot run\|not available\|E_KERNELS" "$TMP/f_$k.log" && { echo "     ($k: not runnable on this CPU)"; continue; }
            bad "fast tier on $k ($act activations): generate failed"; continue
        fi
        got=$(grep '^generated:' "$TMP/f_$k.log")
        [ -z "$want" ] && want=$got
        check "fast tier, $act activations, on $k equals the reference path ($got)" "[ '$got' = '$want' ]"
    done
done

echo "--- quantize --src-format fp8 vs the direct load"
if "$BIN" quantize --src "$OFF" --dst "$TMP/conv" --src-format fp8 >"$TMP/q.log" 2>&1 &&
   "$BIN" mkmodel --config tiny --smooth --seed 7 --rotation identity --out "$TMP/w4" --quiet >"$TMP/m.log" 2>&1; then
    part "$PY" tests/fp8/fp8_agree.py --bin "$BIN" --official "$OFF" --converted "$TMP/conv" --w4a8 "$TMP/w4" --tmp "$TMP"
    "$BIN" generate --model "$TMP/w4" --prompt-ids 5,6 --max-tokens 2 --activations e4m3 >"$TMP/w4e.log" 2>&1; rc=$?
    check "--activations e4m3 on the W4A8 release is refused (exit $rc) naming config.json and the format" \
        "[ $rc != 0 ] && [ $rc -lt 128 ] && grep -q 'E_ARG: activations e4m3: .*config.json: quantization_config' '$TMP/w4e.log'"
else
    bad "quantize --src-format fp8 / mkmodel yardstick did not run: $(tail -2 "$TMP/q.log" "$TMP/m.log")"
fi

echo "--- routed experts stored as safetensors' F4 [out, in] (the same bytes as packed U8 [out, in/2])"
F4=$TMP/tiny_f4
rm -rf "$F4"; cp -r "$OFF" "$F4"
n_f4=$("$PY" tests/fp8/corrupt.py "$F4" f4)
"$BIN" verify "$F4" >"$TMP/verify_f4.log" 2>&1; rc=$?
check "verify passes the F4 layout ($n_f4 expert weights retagged by an independent writer; N1 counts them as MXFP4)" \
    "[ $rc = 0 ] && [ '${n_f4:-0}' -gt 0 ] && grep -q 'MXFP4 experts $n_f4,' '$TMP/verify_f4.log'"
part "$PY" tests/oracle/compare.py --bin "$BIN" --numerics exact --model "$F4" --tmp "$TMP/cmp_f4" \
    --prompt-lens 157 --chunks 7 --gen 32 --seed 7 --mode decisive --kernels auto --label official-f4
f4_gen() { "$BIN" generate --model "$1" --prompt-ids $ids --max-tokens 24 --numerics fast 2>/dev/null | grep '^generated:'; }
ids=5,6,7,8,9,10,11,12,13,14,15,16
g_u8=$(f4_gen "$OFF"); g_f4=$(f4_gen "$F4")
check "fast tier: F4 and U8 experts give the same tokens ($g_f4)" "[ -n '$g_f4' ] && [ '$g_u8' = '$g_f4' ]"
if "$BIN" quantize --src "$F4" --dst "$TMP/conv_f4" --src-format fp8 >"$TMP/q_f4.log" 2>&1 && [ -d "$TMP/conv" ]; then
    same=1
    for f in "$TMP/conv"/*.safetensors; do cmp -s "$f" "$TMP/conv_f4/$(basename "$f")" || same=0; done
    check "quantize --src-format fp8 writes the same release from F4 as from U8 experts" "[ $same = 1 ]"
else
    bad "quantize --src-format fp8 of the F4 layout: $(tail -2 "$TMP/q_f4.log")"
fi

echo "--- serve: the official layout through the same command as the W4A8 release"
. tests/server/serve_lib.sh
if start_server "$TMP/serve.log" --model "$OFF"; then
    check "serve self-checks the official families (mxfp4, fp8, fp8-fast OK)" \
        "grep -q 'kernel mxfp4: OK' '$TMP/serve.log' && grep -q 'kernel fp8: OK' '$TMP/serve.log' && grep -q 'kernel fp8-fast: OK' '$TMP/serve.log'"
    model=$(curl -s "$BASE/v1/models" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')
    curl -s -o "$TMP/c.json" -w '%{http_code}' "$BASE/v1/completions" -H 'Content-Type: application/json' \
        -d "{\"model\":\"$model\",\"prompt\":\"Hello\",\"max_tokens\":8,\"temperature\":0}" >"$TMP/c.code"
    check "a completion from the official layout (HTTP $(cat "$TMP/c.code"), 8 tokens)" \
        "[ \"\$(cat '$TMP/c.code')\" = 200 ] && '$PY' -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(d[\"usage\"][\"completion_tokens\"] != 8)' '$TMP/c.json'"
    stop_server
else
    bad "serve --model (official layout) did not become READY"
fi
if start_server "$TMP/serve_e4m3.log" --model "$OFF" --activations e4m3; then
    curl -s "$BASE/server_info" >"$TMP/info.json"
    check "serve --activations e4m3: /server_info and the selfcheck line say e4m3" \
        "'$PY' -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(\"e4m3\" not in json.dumps(d))' '$TMP/info.json' && grep -q 'activations e4m3' '$TMP/serve_e4m3.log'"
    model=$(curl -s "$BASE/v1/models" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')
    code=$(curl -s -o "$TMP/c2.json" -w '%{http_code}' "$BASE/v1/completions" -H 'Content-Type: application/json' \
        -d "{\"model\":\"$model\",\"prompt\":\"Hello\",\"max_tokens\":8,\"temperature\":0}")
    check "a completion with E4M3 activations (HTTP $code)" "[ '$code' = 200 ]"
    stop_server
else
    bad "serve --model (official layout) --activations e4m3 did not become READY"
fi

echo "--- damaged fixtures are refused naming file and tensor"
refuse() {   # name, corrupt.py args..., then expected code and tensor via globals CODE / TENSOR
    local name=$1; shift
    local d="$TMP/bad_$name"
    rm -rf "$d"; cp -r "$OFF" "$d"
    local file; file=$("$PY" tests/fp8/corrupt.py "$d" "$@") || { bad "$name: corrupt.py failed"; return; }
    "$BIN" generate --model "$d" --prompt-ids 5,6,7 --max-tokens 2 >"$TMP/g_$name.log" 2>&1; local g=$?
    "$BIN" verify "$d" >"$TMP/v_$name.log" 2>&1; local v=$?
    check "$name: generate refuses (exit $g) with $CODE naming $file${TENSOR:+ and $TENSOR}" \
        "[ $g != 0 ] && [ $g -lt 128 ] && grep -q '$CODE' '$TMP/g_$name.log' && grep -q '$file' '$TMP/g_$name.log' && { [ -z '$TENSOR' ] || grep -q '$TENSOR' '$TMP/g_$name.log'; }"
    check "$name: verify fails (exit $v)" "[ $v != 0 ] && [ $v -lt 128 ]"
}
CODE=E_SCALE_NAN TENSOR=layers.0.attn.wq_a.scale refuse scale_nan nan layers.0.attn.wq_a.scale 3
CODE=E_SCALE_NAN TENSOR=layers.0.ffn.experts.2.w2.scale refuse expert_scale_nan nan layers.0.ffn.experts.2.w2.scale 17
CODE=E_WEIGHT_NAN TENSOR=layers.0.attn.wkv.weight refuse weight_nan nan layers.0.attn.wkv.weight 100
CODE=E_SHAPE_MISMATCH TENSOR=layers.0.attn.wkv.scale refuse dense_block_shape shape layers.0.attn.wkv.scale 4 2
CODE=E_SHAPE_MISMATCH TENSOR=layers.0.ffn.experts.0.w1.scale refuse expert_block_shape shape layers.0.ffn.experts.0.w1.scale 32 8
CODE=E_SHARD_TRUNCATED TENSOR= refuse truncated_shard truncate
CODE=E_OFFSETS_RANGE TENSOR=layers.0.ffn.experts.1.w3.weight refuse f4_byte_count f4bytes layers.0.ffn.experts.1.w3.weight

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
