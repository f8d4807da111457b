#!/usr/bin/env bash
# llama.cpp beside dsflash: decode efficiency (% of the read bandwidth dsflash measured in its run)
# and prompt-processing tok/s on a GGUF that reads the same weight bytes per token as the checkpoint.
#
# Why installed at bench time and outside the repository: llama.cpp is a yardstick, not a
# dependency; its code and binaries are never part of dsflash.  npm installs node-llama-cpp and
# its prebuilt CPU backend (optional dependencies omitted, install scripts off: nothing is built
# or downloaded beyond the two packages) into a cache directory; bench/make_gguf.py writes the
# GGUF there too.  Any failure is reported as "llama.cpp: UNAVAILABLE: why" and the table marks
# the llama.cpp column unavailable; the exit status is then 1.
#
# usage: bench/llamacpp_bench.sh --ours BENCH.json --model DIR [--threads N] [--tokens N]
#   BENCH.json: `dsflash bench serve --json` of the same run (bytes per token, read bandwidth,
#   prompt length and chunk); DIR: that checkpoint (its config.json gives the GGUF's shape).
# Environment: DS_LLAMACPP_CACHE (default ${XDG_CACHE_HOME:-~/.cache}/dsflash-bench/llamacpp),
#   PYTHON (python3 with NumPy; default: the first of python3, /usr/bin/python3 that has it).
set -u
here=$(cd "$(dirname "$0")" && pwd)
OURS= MODEL= THREADS=$(nproc) TOKENS=32
while [ $# -gt 0 ]; do
    case $1 in
        --ours) OURS=$2; shift 2 ;;
        --model) MODEL=$2; shift 2 ;;
        --threads) THREADS=$2; shift 2 ;;
        --tokens) TOKENS=$2; shift 2 ;;
        *) echo "llamacpp_bench: unknown option '$1'" >&2; exit 2 ;;
    esac
done
if [ ! -f "$OURS" ] || [ ! -f "$MODEL/config.json" ]; then
    echo "llamacpp_bench: --ours must name a bench serve --json file (got '$OURS') and --model a checkpoint" \
         "folder with config.json (got '$MODEL')" >&2
    exit 2
fi
CACHE=${DS_LLAMACPP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/dsflash-bench/llamacpp}
VERSION=3.22.1
unavailable() {   # the runner prints the UNAVAILABLE line and the table with the column marked
    node "$here/llamacpp_run.mjs" --ours "$OURS" --unavailable "$1" || true
    command -v node >/dev/null || echo "llama.cpp: UNAVAILABLE: $1"
    exit 1
}
command -v node >/dev/null || unavailable "node is not installed"
pick_python() {   # $PYTHON, else the first python3 on PATH or the system one that has NumPy
    local p
    for p in ${PYTHON:-} python3 /usr/bin/python3; do
        "$p" -c 'import numpy' 2>/dev/null && { echo "$p"; return 0; }
    done
    return 1
}
PY=$(pick_python) || unavailable "no python3 with NumPy for bench/make_gguf.py (set PYTHON)"
mkdir -p "$CACHE/gguf" || unavailable "cannot create the cache directory $CACHE"

installed() {
    node -e 'const v = require(process.argv[1] + "/node_modules/node-llama-cpp/package.json").version;
             require(process.argv[1] + "/node_modules/@node-llama-cpp/linux-x64/package.json");
             process.exit(v === process.argv[2] ? 0 : 1)' "$CACHE" "$VERSION" 2>/dev/null
}
if ! installed; then
    echo "llamacpp_bench: installing node-llama-cpp@$VERSION + @node-llama-cpp/linux-x64@$VERSION into $CACHE"
    [ -f "$CACHE/package.json" ] || echo '{"name":"dsflash-llamacpp-bench","private":true}' > "$CACHE/package.json"
    if ! npm install --prefix "$CACHE" --omit=optional --ignore-scripts --no-audit --no-fund \
            "node-llama-cpp@$VERSION" "@node-llama-cpp/linux-x64@$VERSION" > "$CACHE/npm-install.log" 2>&1 \
        || ! installed; then
        unavailable "npm install of node-llama-cpp@$VERSION failed (log: $CACHE/npm-install.log: $(tail -1 "$CACHE/npm-install.log"))"
    fi
fi

# The GGUF's shape from the checkpoint, its size from the bytes dsflash read per decoded token.
shape=$("$PY" - "$OURS" "$MODEL/config.json" <<'EOF'
import json, sys
ours, cfg = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
t = cfg.get("text_config", cfg)
b = ours["tiers"][0]["concurrency"][0]["bytes_per_step"]
print(int(b), t["vocab_size"], t["hidden_size"], t["num_hidden_layers"], t["num_attention_heads"])
EOF
) || unavailable "cannot read the bytes per token from $OURS or the shape from $MODEL/config.json"
read -r BYTES VOCAB DIM LAYERS HEADS <<< "$shape"
MB=$(( (BYTES + 500000) / 1000000 ))
GGUF="$CACHE/gguf/twin-v$VOCAB-d$DIM-l$LAYERS-h$HEADS-${MB}MB.gguf"
if [ ! -f "$GGUF" ] || [ ! -f "$GGUF.json" ]; then
    "$PY" "$here/make_gguf.py" --out "$GGUF" --bytes-per-token "$BYTES" --vocab "$VOCAB" --dim "$DIM" \
        --layers "$LAYERS" --heads "$HEADS" --info "$GGUF.json" || unavailable "bench/make_gguf.py failed"
fi
node "$here/llamacpp_run.mjs" --lib "$CACHE" --gguf "$GGUF" --info "$GGUF.json" --ours "$OURS" \
    --threads "$THREADS" --tokens "$TOKENS"
