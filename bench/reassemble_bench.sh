#!/usr/bin/env bash
# Reassembly throughput as a percentage of what this machine allows (TOOLS.md §1.2 budget; issue 5
# benchmark).  The limit is measured in the same run: min(sequential read bandwidth of the parts
# with their page cache dropped, single-stream SHA-256 speed of this CPU through OpenSSL, the
# library dsflash uses).  Reassembly is timed without and with readback; with readback every byte
# is read twice, so its ideal is about half the limit.
#
# usage: bench/reassemble_bench.sh [--dir SCRATCH] [--size-mib N] [--parts N] [--json-out FILE] [--keep]
# Needs about 2x the data size of free space in SCRATCH (default: $TMPDIR or /tmp).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${DSFLASH_BIN:-$PWD/build/${BUILD:-release}/dsflash}
SCRATCH=${TMPDIR:-/tmp}; SIZE_MIB=2048; NPARTS=4; JSON=""; KEEP=0
while [ $# -gt 0 ]; do
    case "$1" in
        --dir) SCRATCH=$2; shift 2 ;;
        --size-mib) SIZE_MIB=$2; shift 2 ;;
        --parts) NPARTS=$2; shift 2 ;;
        --json-out) JSON=$2; shift 2 ;;
        --keep) KEEP=1; shift ;;
        *) echo "usage: $0 [--dir SCRATCH] [--size-mib N] [--parts N] [--json-out FILE] [--keep]" >&2; exit 2 ;;
    esac
done
[ -x "$BIN" ] || { echo "reassemble_bench: $BIN not built" >&2; exit 5; }
W=$(mktemp -d "$SCRATCH/dsflash-rbench.XXXXXX")
[ $KEEP = 1 ] || trap 'rm -rf "$W"' EXIT
BYTES=$((SIZE_MIB * 1048576))
PART=$(( (BYTES + NPARTS - 1) / NPARTS ))
now() { date +%s.%N; }
rate() { awk -v b="$1" -v t0="$2" -v t1="$3" 'BEGIN { printf "%.1f", b / (t1 - t0) / 1048576 }'; }
drop_cache() { for f in "$@"; do dd if="$f" iflag=nocache count=0 status=none; done; }

echo "reassemble bench: $SIZE_MIB MiB in $NPARTS parts under $W ($(nproc) CPUs, load average $(cut -d' ' -f1 /proc/loadavg))"
# Incompressible data without paying /dev/urandom's price: AES-CTR keystream.
openssl enc -aes-128-ctr -nosalt -pass pass:dsflash-bench -in <(head -c $BYTES /dev/zero) -out "$W/data.bin" 2>/dev/null
"$BIN" split "$W/data.bin" --part-size $PART --out-dir "$W/p" --quiet --no-verify > /dev/null
rm "$W/data.bin"
PARTS=("$W"/p/data.bin.part-*)
sync

# 0. a plain copy of the parts into one file with fsync: what the disk gives for I/O alone
drop_cache "${PARTS[@]}"
t0=$(now); cat "${PARTS[@]}" > "$W/copy.bin"; sync "$W/copy.bin"; t1=$(now)
COPY=$(rate $BYTES "$t0" "$t1")
rm "$W/copy.bin"; sync
# 1. sequential read bandwidth of the parts, cache dropped
drop_cache "${PARTS[@]}"
t0=$(now); cat "${PARTS[@]}" > /dev/null; t1=$(now)
READ=$(rate $BYTES "$t0" "$t1")
# 2. SHA-256 speed of this CPU (OpenSSL EVP, one stream, 16 KiB blocks: its steady state)
SHA=$(openssl speed -evp sha256 -bytes 16384 -seconds 3 2>/dev/null | awk '/^sha256/ { v=$NF; sub(/k$/, "", v); printf "%.1f", v * 1000 / 1048576 }')
LIMIT=$(awk -v a="$READ" -v b="$SHA" 'BEGIN { printf "%.1f", (a < b ? a : b) }')

# 3. reassembly without readback (one read, two hashes on two threads, one write)
drop_cache "${PARTS[@]}"
t0=$(now); /usr/bin/time -f "%U %S" -o "$W/cpu1" "$BIN" reassemble "$W/p" --no-readback --quiet > "$W/log1"; t1=$(now)
NORB=$(rate $BYTES "$t0" "$t1")
# CPU seconds per GiB (user, sys): independent of other load on a shared machine
CPU1=$(awk -v g="$SIZE_MIB" '{ printf "%.2f s user + %.2f s sys", $1 * 1024 / g, $2 * 1024 / g }' "$W/cpu1")
rm -f "$W/p/data.bin" "$W/p/data.bin.verified"
sync
# 4. default reassembly (with readback after dropping the new file's cache)
drop_cache "${PARTS[@]}"
t0=$(now); "$BIN" reassemble "$W/p" --quiet > "$W/log2"; t1=$(now)
RB=$(rate $BYTES "$t0" "$t1")
grep -q "^\[OK\] data.bin restored and verified" "$W/log1" && grep -q "^\[OK\] data.bin restored and verified" "$W/log2" \
    || { echo "reassemble_bench: a reassembly failed"; cat "$W/log1" "$W/log2"; exit 1; }

P1=$(awk -v a="$NORB" -v l="$LIMIT" 'BEGIN { printf "%.0f", 100 * a / l }')
P2=$(awk -v a="$RB" -v l="$LIMIT" 'BEGIN { printf "%.0f", 100 * a / l }')
P3=$(awk -v a="$NORB" -v l="$LIMIT" -v c="$COPY" 'BEGIN { m = (l < c ? l : c); printf "%.0f", 100 * a / m }')
SHAIMPL=$("$BIN" reassemble "$W/p" 2>/dev/null | sed -n 's/^reassemble: sha256 via //p')
printf "  sequential read (cache dropped) %8.1f MiB/s\n" "$READ"
printf "  sha256, one stream (%s) %8.1f MiB/s\n" "$SHAIMPL" "$SHA"
printf "  limit = min of the two          %8.1f MiB/s\n" "$LIMIT"
printf "  plain copy (cat + fsync)        %8.1f MiB/s  (I/O alone, no hashing)\n" "$COPY"
printf "  reassemble --no-readback        %8.1f MiB/s  = %s%% of the limit\n" "$NORB" "$P1"
printf "  reassemble --no-readback CPU per GiB: %s (two SHA-256 streams ideally %.2f s user)\n" "$CPU1" "$(awk -v s="$SHA" 'BEGIN { print 2 * 1024 / s }')"
printf "  reassemble (with readback)      %8.1f MiB/s  = %s%% of the limit (ideal ~50%%: two passes)\n" "$RB" "$P2"
printf "  --no-readback vs min(limit, plain copy): %s%%\n" "$P3"
if [ -n "$JSON" ]; then
    tmp="$JSON.tmp.$$"
    printf '{"schema":"dsflash-reassemble-bench/1","bytes":%s,"parts":%s,"cpus":%s,"sha256_impl":"%s","read_mib_s":%s,"sha256_mib_s":%s,"limit_mib_s":%s,"copy_mib_s":%s,"no_readback_vs_copy_pct":%s,"no_readback_mib_s":%s,"no_readback_pct":%s,"readback_mib_s":%s,"readback_pct":%s}\n' \
        $BYTES $NPARTS "$(nproc)" "$SHAIMPL" "$READ" "$SHA" "$LIMIT" "$COPY" "$P3" "$NORB" "$P1" "$RB" "$P2" > "$tmp"
    mv "$tmp" "$JSON"
fi
