#!/usr/bin/env bash
# Suite for `dsflash split` (TOOLS.md §1.3).  The oracle is coreutils: the parts must equal what
# `split -b` cuts, and every hash in PARTS.sha256 must equal `sha256sum`.  Also: size suffixes,
# idempotence, other targets' blocks kept, re-splitting with another part size, interruption and
# a full disk leaving the previous split untouched, and the split -> reassemble round trip.
cd "$(dirname "$0")"
. ./lib.sh
ROOT=$DS_TEST_TMP/split.$$
rm -rf "$ROOT"; mkdir -p "$ROOT"
MiB=1048576
newcase() { C=$ROOT/$1; mkdir -p "$C"; LOG=$C/log; }
hash() { sha256sum < "$1" | cut -c1-64; }

# --- parts and hashes agree with coreutils ---------------------------------------------------------
newcase oracle
head -c $((5 * MiB + 333)) /dev/urandom > "$C/big.bin"
"$B" split "$C/big.bin" --part-size 1M > "$LOG" 2>&1; expect_rc "split 5 MiB + 333 B into 1M parts" 0 $? "$LOG"
(cd "$C" && mkdir ref && split -b $MiB -d -a 2 big.bin ref/p-)
allsame=1
for i in 0 1 2 3 4 5; do cmp -s "$C/big.bin.part-0$i-of-06" "$C/ref/p-0$i" || allsame=0; done
check "the 6 parts equal coreutils split's" [ $allsame = 1 ]
check "whole-file line equals sha256sum" grep -qx "$(hash "$C/big.bin")  big.bin" "$C/PARTS.sha256"
okh=1
for i in 0 1 2 3 4 5; do grep -qx "$(hash "$C/ref/p-0$i")  big.bin.part-0$i-of-06" "$C/PARTS.sha256" || okh=0; done
check "every part line equals sha256sum" [ $okh = 1 ]
check "header line with size, parts, part_size" grep -qx "# big.bin size=$((5 * MiB + 333)) parts=6 part_size=$MiB" "$C/PARTS.sha256"
check "sha256sum -c accepts PARTS.sha256 as written" bash -c "cd '$C' && grep -v '^#' PARTS.sha256 | sha256sum -c --quiet -"
check "source untouched" bash -c "[ \$(stat -c %s '$C/big.bin') = $((5 * MiB + 333)) ]"
check "no temporary or lock files left" bash -c "! ls '$C' | grep -q -e partial -e '\.lock' -e '\.tmp\.'"
check "OK line" grep -q "^\[OK\] big.bin split into 6 parts of 1.0 MiB in $C (sha256 $(hash "$C/big.bin")), parts verified" "$LOG"

# --- idempotent rerun ------------------------------------------------------------------------
m0=$(stat -c %Y.%i "$C/big.bin.part-03-of-06")
"$B" split "$C/big.bin" --part-size 1MiB > "$LOG" 2>&1; expect_rc "rerun with the same layout" 0 $? "$LOG"
check "rerun reports up to date" grep -q "^\[OK\] big.bin: 6 parts already up to date" "$LOG"
check "rerun rewrote nothing" [ "$(stat -c %Y.%i "$C/big.bin.part-03-of-06")" = "$m0" ]
# a damaged part is rewritten by a rerun
printf 'X' | dd of="$C/big.bin.part-02-of-06" bs=1 seek=5 conv=notrunc status=none
"$B" split "$C/big.bin" --part-size 1M > "$LOG" 2>&1; expect_rc "rerun with a damaged part" 0 $? "$LOG"
check "damaged part rewritten" cmp -s "$C/big.bin.part-02-of-06" "$C/ref/p-02"

# --- another target's block is kept; blocks sorted; re-split with another size ----------------
newcase twotargets
head -c $((2 * MiB)) /dev/urandom > "$C/b.bin"
head -c $((3 * MiB)) /dev/urandom > "$C/a.bin"
"$B" split "$C/b.bin" --part-size 1M --quiet > "$LOG" 2>&1; expect_rc "split b.bin" 0 $? "$LOG"
"$B" split "$C/a.bin" --part-size 1M --quiet > "$LOG" 2>&1; expect_rc "split a.bin into the same directory" 0 $? "$LOG"
check "both blocks present, a.bin first" bash -c "grep '^#' '$C/PARTS.sha256' | tr '\n' ' ' | grep -q '^# a.bin .*# b.bin '"
check "b.bin block unchanged" grep -qx "$(hash "$C/b.bin")  b.bin" "$C/PARTS.sha256"
"$B" split "$C/a.bin" --part-size 2M --quiet > "$LOG" 2>&1; expect_rc "re-split a.bin with 2M parts" 0 $? "$LOG"
check "old 3-part files removed" bash -c "! ls '$C' | grep -q 'a.bin.part-..-of-03'"
check "new layout has 2 parts" bash -c "[ \$(ls '$C' | grep -c 'a.bin.part-..-of-02') = 2 ]"
check "b.bin block still there" grep -qx "$(hash "$C/b.bin")  b.bin" "$C/PARTS.sha256"
mkdir "$C/r" && mv "$C"/*.part-* "$C/PARTS.sha256" "$C/r/"
"$B" reassemble "$C/r" --quiet > "$LOG" 2>&1; expect_rc "reassemble both targets from dsflash-made parts" 0 $? "$LOG"
check "round trip a.bin" cmp -s "$C/r/a.bin" "$C/a.bin"
check "round trip b.bin" cmp -s "$C/r/b.bin" "$C/b.bin"

# --- --out-dir, exact part size, one part, wide indices -----------------------------------------
newcase outdir
head -c 8192 /dev/urandom > "$C/s.bin"
"$B" split "$C/s.bin" --part-size 4096 --out-dir "$C/o" --quiet > "$LOG" 2>&1; expect_rc "exact multiple into --out-dir" 0 $? "$LOG"
check "two full parts" bash -c "[ \$(stat -c %s '$C/o/s.bin.part-00-of-02') = 4096 ] && [ \$(stat -c %s '$C/o/s.bin.part-01-of-02') = 4096 ]"
"$B" split "$C/s.bin" --part-size 1G --out-dir "$C/one" --quiet > "$LOG" 2>&1; expect_rc "part size larger than the file" 0 $? "$LOG"
check "one part equal to the file" cmp -s "$C/one/s.bin.part-00-of-01" "$C/s.bin"
head -c 1010 /dev/urandom > "$C/w.bin"
"$B" split "$C/w.bin" --part-size 10 --out-dir "$C/wide" --quiet --no-verify > "$LOG" 2>&1; expect_rc "101 parts" 0 $? "$LOG"
check "indices are 3 digits wide" bash -c "[ -e '$C/wide/w.bin.part-000-of-101' ] && [ -e '$C/wide/w.bin.part-100-of-101' ]"
"$B" reassemble "$C/wide" --quiet > "$LOG" 2>&1; expect_rc "reassemble 101 parts" 0 $? "$LOG"
check "round trip of 101 parts" cmp -s "$C/wide/w.bin" "$C/w.bin"

# --- part-size parsing and usage -----------------------------------------------------------------
newcase usage
head -c 5000 /dev/urandom > "$C/u.bin"
for good in 4096 4K 4k 4KiB 4096B 1000KB; do
    "$B" split "$C/u.bin" --part-size $good --out-dir "$C/g$good" --quiet --no-verify > "$LOG" 2>&1
    expect_rc "--part-size $good accepted" 0 $? "$LOG"
done
check "1000KB is decimal (5000 B -> 1 part)" [ -e "$C/g1000KB/u.bin.part-00-of-01" ]
check "4K is binary (5000 B -> 2 parts)" [ -e "$C/g4K/u.bin.part-01-of-02" ]
for badv in 0 0G -1 4X 1.5G "" G 99999999999999999999; do
    "$B" split "$C/u.bin" --part-size "$badv" > "$LOG" 2>&1
    expect_rc "--part-size '$badv' rejected" 2 $? "$LOG"
done
head -c 10000 /dev/zero > "$C/z.bin"
"$B" split "$C/z.bin" --part-size 1 > "$LOG" 2>&1; expect_rc "10000 parts exceed the limit" 2 $? "$LOG"
"$B" split "$C/u.bin" --part > "$LOG" 2>&1; expect_rc "abbreviated option" 2 $? "$LOG"
"$B" split "$C/u.bin" --no-verify --jobs 4 > "$LOG" 2>&1; expect_rc "--jobs with --no-verify (it would be ignored)" 2 $? "$LOG"
check "--jobs refusal says why" grep -q "^dsflash split: --jobs: .*--no-verify turns off" "$LOG"
"$B" split > "$LOG" 2>&1; expect_rc "no FILE" 2 $? "$LOG"
"$B" split "$C/none.bin" > "$LOG" 2>&1; expect_rc "missing FILE" 5 $? "$LOG"
: > "$C/empty.bin"
"$B" split "$C/empty.bin" > "$LOG" 2>&1; expect_rc "empty FILE" 1 $? "$LOG"
check "no parts from failed runs" bash -c "! ls '$C' | grep -q 'u.bin.part-\|none.bin.part\|empty.bin.part\|z.bin.part'"

# --- full disk and interruption leave the previous split untouched -------------------------------
newcase faults
head -c $((4 * MiB)) /dev/urandom > "$C/f.bin"
"$B" split "$C/f.bin" --part-size 1M --quiet > "$LOG" 2>&1; expect_rc "initial split" 0 $? "$LOG"
cp "$C/PARTS.sha256" "$C/manifest.before"
head -c $((4 * MiB)) /dev/urandom > "$C/f.bin"        # new content, so a rerun must rewrite
(ulimit -f 1536; exec "$B" split "$C/f.bin" --part-size 2M --quiet) > "$LOG" 2>&1
expect_rc "file size limit while splitting" 3 $? "$LOG"
check "PARTS.sha256 unchanged after the failure" cmp -s "$C/PARTS.sha256" "$C/manifest.before"
check "no .partial files left" bash -c "! ls '$C' | grep -q partial"
check "old parts still verify" bash -c "cd '$C' && grep -v '^#' PARTS.sha256 | grep part- | sha256sum -c --quiet -"
DSFLASH_TEST_BLOCK_BYTES=65536 DSFLASH_TEST_BLOCK_DELAY_MS=15 "$B" split "$C/f.bin" --part-size 2M --quiet > "$LOG" 2>&1 &
pid=$!
for _ in $(seq 1 1500); do ls "$C" | grep -q 'part-01-of-02.partial' && break; sleep 0.02; done
kill -INT $pid; wait $pid; rc=$?
expect_rc "SIGINT while splitting" 130 $rc "$LOG"
check "PARTS.sha256 unchanged after the interrupt" cmp -s "$C/PARTS.sha256" "$C/manifest.before"
check "no .partial files left after the interrupt" bash -c "! ls '$C' | grep -q partial"
"$B" split "$C/f.bin" --part-size 2M --quiet > "$LOG" 2>&1; expect_rc "rerun with room" 0 $? "$LOG"
check "new whole hash recorded" grep -qx "$(hash "$C/f.bin")  f.bin" "$C/PARTS.sha256"
check "old 4-part layout removed" bash -c "! ls '$C' | grep -q 'of-04'"

# --- a split and a reassembly of the same file cannot run at once --------------------------------
newcase lock
head -c $((4 * MiB)) /dev/urandom > "$C/l.bin"
DSFLASH_TEST_BLOCK_BYTES=65536 DSFLASH_TEST_BLOCK_DELAY_MS=25 "$B" split "$C/l.bin" --part-size 1M --quiet > "$C/log1" 2>&1 &
pid=$!
for _ in $(seq 1 1500); do [ -e "$C/l.bin.lock" ] && break; sleep 0.01; done
"$B" split "$C/l.bin" --part-size 1M --quiet > "$LOG" 2>&1; rc=$?
wait $pid; rc1=$?
expect_rc "second split refused" 4 $rc "$LOG"
expect_rc "first split completes" 0 $rc1 "$C/log1"

rm -rf "$ROOT"
finish
