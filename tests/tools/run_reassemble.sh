#!/usr/bin/env bash
# Fault-injection suite for `dsflash reassemble` (TOOLS.md §1.2, CHECKPOINT.md §10).  Parts and
# PARTS.sha256 are produced by coreutils (split, sha256sum), never by dsflash, so every hash the
# tool checks comes from an independent implementation.  Every case asserts the invariant: no bad
# or partial file under the final name, the right exit class, and a successful rerun once the
# inputs are good.  Files are a few MiB; DSFLASH_TEST_BLOCK_BYTES makes them span many blocks and
# DSFLASH_TEST_BLOCK_DELAY_MS slows a run down so that it can be killed at a known point.
cd "$(dirname "$0")"
. ./lib.sh
ROOT=$DS_TEST_TMP/reassemble.$$
rm -rf "$ROOT"; mkdir -p "$ROOT"
MiB=1048576
T=engram.weight.safetensors
newcase() { C=$ROOT/$1; D=$C/d; mkdir -p "$C"; LOG=$C/log; }

# --- happy path, idempotence, --delete-parts -------------------------------------------------
newcase basic
mkparts "$D" "$T" $((5 * MiB + 12345)) $MiB
"$B" reassemble "$D" --check-only > "$LOG" 2>&1; expect_rc "check-only on good parts asks for work" 10 $? "$LOG"
check "check-only prints NEED" grep -q "^\[NEED\] $T needs reassembly (parts verified)" "$LOG"
check "check-only writes nothing" bash -c "[ ! -e '$D/$T' ] && [ ! -e '$D/$T.verified' ] && [ ! -e '$D/$T.partial' ]"
"$B" reassemble "$D" > "$LOG" 2>&1; expect_rc "reassemble good parts" 0 $? "$LOG"
check "target equals the original bytes" cmp -s "$D/$T" "$C/$T.orig"
check "OK line carries the whole-file hash" grep -q "^\[OK\] $T restored and verified (sha256 $(sha256sum < "$C/$T.orig" | cut -c1-64))" "$LOG"
check "summary line" grep -q "^reassemble: all 1 targets passed$" "$LOG"
check "stamp written, journal and lock removed" bash -c "[ -s '$D/$T.verified' ] && [ ! -e '$D/$T.partial.json' ] && [ ! -e '$D/$T.lock' ] && [ ! -e '$D/$T.partial' ]"
check "stamp holds the hash" grep -q "$(sha256sum < "$C/$T.orig" | cut -c1-64)" "$D/$T.verified"
ino=$(stat -c %i "$D/$T")
s=$(date +%s%N); "$B" reassemble "$D" > "$LOG" 2>&1; rc=$?; e=$(date +%s%N)
expect_rc "rerun after success" 0 $rc "$LOG"
check "rerun reports already verified" grep -q "^\[OK\] $T already exists and verified" "$LOG"
check "rerun did not rewrite the target" [ "$(stat -c %i "$D/$T")" = "$ino" ]
"$B" reassemble "$D" --check-only > "$LOG" 2>&1; expect_rc "check-only after success" 0 $? "$LOG"
"$B" reassemble --dir "$D" --delete-parts > "$LOG" 2>&1; expect_rc "--delete-parts on a verified target" 0 $? "$LOG"
check "parts deleted, each printed" bash -c "[ \$(grep -c '^deleted $T.part-0[0-5]-of-06' '$LOG') = 6 ] && ! ls '$D' | grep -q part-"
check "PARTS.sha256 kept" [ -s "$D/PARTS.sha256" ]
"$B" reassemble "$D" > "$LOG" 2>&1; expect_rc "rerun after --delete-parts" 0 $? "$LOG"
# A touched target (new mtime) no longer matches its stamp: it is re-hashed, still passes.
touch "$D/$T"
"$B" reassemble "$D" > "$LOG" 2>&1; expect_rc "stamp mismatch leads to a full re-hash that passes" 0 $? "$LOG"
check "target still intact" cmp -s "$D/$T" "$C/$T.orig"

# --- corrupt part ------------------------------------------------------------------------------
newcase corrupt
mkparts "$D" "$T" $((4 * MiB)) $MiB
flip_byte "$D/$T.part-02-of-04" 777
"$B" reassemble "$D" --check-only > "$LOG" 2>&1; expect_rc "check-only finds the corrupt part" 1 $? "$LOG"
check "check-only names part 02" grep -q "^\[FAIL\] $T: part 02 sha256 mismatch" "$LOG"
"$B" reassemble "$D" --delete-parts > "$LOG" 2>&1; expect_rc "reassemble with a corrupt part" 1 $? "$LOG"
check "FAIL names part 02" grep -q "^\[FAIL\] $T: part 02 sha256 mismatch" "$LOG"
check "no target, no temporary file" bash -c "[ ! -e '$D/$T' ] && [ ! -e '$D/$T.partial' ] && [ ! -e '$D/$T.partial.json' ]"
check "parts kept after failure despite --delete-parts" [ "$(ls "$D" | grep -c "part-")" = 4 ]
check "summary counts the failure" grep -q "^reassemble: 1 of 1 targets failed$" "$LOG"
split -b $MiB -d -a 2 "$C/$T.orig" "$C/fix-" && cp "$C/fix-02" "$D/$T.part-02-of-04"
"$B" reassemble "$D" > "$LOG" 2>&1; expect_rc "rerun after repairing the part" 0 $? "$LOG"
check "repaired target equals the original" cmp -s "$D/$T" "$C/$T.orig"

# --- missing part -----------------------------------------------------------------------------
newcase missing
mkparts "$D" "$T" $((3 * MiB + 5)) $MiB
mv "$D/$T.part-01-of-04" "$C/"
"$B" reassemble "$D" > "$LOG" 2>&1; expect_rc "missing part is input missing" 5 $? "$LOG"
check "message names the missing part" grep -q "part set inconsistent (.*missing $T.part-01-of-04" "$LOG"
check "nothing written" bash -c "[ ! -e '$D/$T' ] && [ ! -e '$D/$T.partial' ]"
"$B" reassemble "$D" --check-only > "$LOG" 2>&1; expect_rc "check-only with a missing part" 5 $? "$LOG"
mv "$C/$T.part-01-of-04" "$D/"
"$B" reassemble "$D" > "$LOG" 2>&1; expect_rc "rerun once the part is back" 0 $? "$LOG"
check "target equals the original" cmp -s "$D/$T" "$C/$T.orig"

# --- part-count mismatch ----------------------------------------------------------------------
newcase count
mkparts "$D" "$T" $((3 * MiB)) $MiB
cp "$D/$T.part-02-of-03" "$D/$T.part-03-of-03.bak"
# an extra part file that claims another total
head -c 100 /dev/urandom > "$D/$T.part-03-of-04"
"$B" reassemble "$D" > "$LOG" 2>&1; expect_rc "stray part with another total" 1 $? "$LOG"
check "message says the counts disagree" grep -q "part set inconsistent (.*says 4 parts, 4 found\|part set inconsistent (.*says 3 parts, 4 found" "$LOG"
check "nothing written" bash -c "[ ! -e '$D/$T' ] && [ ! -e '$D/$T.partial' ]"
rm "$D/$T.part-03-of-04" "$D/$T.part-03-of-03.bak"
# PARTS.sha256 lists fewer parts than exist on disk (a manifest for another cut)
newcase count2
mkparts "$D" "$T" $((3 * MiB)) $MiB
sed -i "/part-02-of-03/d" "$D/PARTS.sha256"
sed -i "s/parts=3/parts=2/" "$D/PARTS.sha256"
"$B" reassemble "$D" > "$LOG" 2>&1; rc=$?
check "manifest listing 2 of 3 parts is rejected (exit 1, got $rc)" [ $rc = 1 ]
check "nothing written" bash -c "[ ! -e '$D/$T' ] && [ ! -e '$D/$T.partial' ]"

# --- truncated part ---------------------------------------------------------------------------
newcase truncated
mkparts "$D" "$T" $((4 * MiB)) $MiB
cp "$D/$T.part-01-of-04" "$C/p1"
truncate -s $((MiB - 4096)) "$D/$T.part-01-of-04"
"$B" reassemble "$D" > "$LOG" 2>&1; expect_rc "truncated middle part" 1 $? "$LOG"
check "message names the short part" grep -q "$T.part-01-of-04 is $((MiB - 4096)) bytes, expected $MiB" "$LOG"
check "nothing written" bash -c "[ ! -e '$D/$T' ] && [ ! -e '$D/$T.partial' ]"
cp "$C/p1" "$D/$T.part-01-of-04"
# truncated last part, with a bare '# name' header (no size=): only the hash can catch it
newcase truncated_last
mkparts "$D" "$T" $((3 * MiB + 1000)) $MiB bare
truncate -s 500 "$D/$T.part-03-of-04"
"$B" reassemble "$D" > "$LOG" 2>&1; expect_rc "truncated last part, no size in the header" 1 $? "$LOG"
check "caught by the part hash" grep -q "part 03 sha256 mismatch" "$LOG"
check "no target, no temporary file" bash -c "[ ! -e '$D/$T' ] && [ ! -e '$D/$T.partial' ] && [ ! -e '$D/$T.partial.json' ]"
split -b $MiB -d -a 2 "$C/$T.orig" "$C/fix-" && cp "$C/fix-03" "$D/$T.part-03-of-04"
"$B" reassemble "$D" > "$LOG" 2>&1; expect_rc "rerun after restoring the last part" 0 $? "$LOG"
check "target equals the original" cmp -s "$D/$T" "$C/$T.orig"

# --- wrong whole-file hash (parts fine) ---------------------------------------------------------
newcase whole
mkparts "$D" "$T" $((2 * MiB)) $MiB
good=$(sha256sum < "$C/$T.orig" | cut -c1-64)
sed -i "s/^$good  $T\$/$(printf '0%.0s' {1..64})  $T/" "$D/PARTS.sha256"
"$B" reassemble "$D" > "$LOG" 2>&1; expect_rc "whole-file hash mismatch" 1 $? "$LOG"
check "FAIL says whole-file mismatch" grep -q "whole-file sha256 mismatch" "$LOG"
check "no target, no temporary file" bash -c "[ ! -e '$D/$T' ] && [ ! -e '$D/$T.partial' ]"

# --- write-path corruption: the hashes of what was read match, only the readback can see it -------
newcase readback
mkparts "$D" "$T" $((3 * MiB)) $MiB
DSFLASH_TEST_CORRUPT_WRITE_AT=$((2 * MiB + 99)) "$B" reassemble "$D" > "$LOG" 2>&1; expect_rc "a byte corrupted on the way to disk" 1 $? "$LOG"
check "readback names the mismatch" grep -q "^\[FAIL\] $T: readback sha256 mismatch (expected .*, got .*): the write path corrupted data" "$LOG"
check "no target, no temporary file" bash -c "[ ! -e '$D/$T' ] && [ ! -e '$D/$T.partial' ] && [ ! -e '$D/$T.partial.json' ]"
"$B" reassemble "$D" > "$LOG" 2>&1; expect_rc "rerun on a healthy write path" 0 $? "$LOG"
check "target equals the original" cmp -s "$D/$T" "$C/$T.orig"

# --- --no-resume discards a leftover; --jobs verifies in parallel ------------------------------------
newcase noresume
mkparts "$D" "$T" $((4 * MiB)) $MiB
DSFLASH_TEST_BLOCK_BYTES=65536 DSFLASH_TEST_BLOCK_DELAY_MS=15 "$B" reassemble "$D" --quiet > "$LOG" 2>&1 &
pid=$!
for _ in $(seq 1 1500); do
    [ -f "$D/$T.partial.json" ] && [ "$(grep -c '"end"' "$D/$T.partial.json" 2>/dev/null)" -ge 1 ] && break
    sleep 0.02
done
kill -9 $pid; wait $pid 2>/dev/null
"$B" reassemble "$D" --no-resume > "$LOG" 2>&1; expect_rc "--no-resume after a crash" 0 $? "$LOG"
check "--no-resume says it discards the leftover" grep -q "^\[info\] $T: --no-resume: discarding" "$LOG"
check "target equals the original" cmp -s "$D/$T" "$C/$T.orig"
rm "$D/$T" "$D/$T.verified"
"$B" reassemble "$D" --check-only --jobs 4 > "$LOG" 2>&1; expect_rc "--check-only --jobs 4" 10 $? "$LOG"

# --- existing target with other content: untouched, then --replace ----------------------------
newcase existing
mkparts "$D" "$T" $((2 * MiB)) $MiB
head -c 1000 /dev/urandom > "$D/$T"; cp "$D/$T" "$C/other"
"$B" reassemble "$D" > "$LOG" 2>&1; expect_rc "existing different target" 1 $? "$LOG"
check "FAIL says left untouched" grep -q "^\[FAIL\] $T exists but sha256 differs (expected .*, got .*); left untouched" "$LOG"
check "existing file untouched" cmp -s "$D/$T" "$C/other"
"$B" reassemble "$D" --replace > "$LOG" 2>&1; expect_rc "--replace rebuilds it" 0 $? "$LOG"
check "replaced by the verified file" cmp -s "$D/$T" "$C/$T.orig"

# --- full disk: RLIMIT_FSIZE --------------------------------------------------------------------
newcase fsize
mkparts "$D" "$T" $((6 * MiB)) $MiB
(ulimit -f 3072; exec "$B" reassemble "$D" --quiet) > "$LOG" 2>&1; expect_rc "file size limit hit mid-write is an I/O error" 3 $? "$LOG"
check "message names the write failure" grep -q "write of .* failed: File too large" "$LOG"
check "no target, no temporary file" bash -c "[ ! -e '$D/$T' ] && [ ! -e '$D/$T.partial' ] && [ ! -e '$D/$T.partial.json' ]"
"$B" reassemble "$D" > "$LOG" 2>&1; expect_rc "rerun with room" 0 $? "$LOG"
check "target equals the original" cmp -s "$D/$T" "$C/$T.orig"

# --- full disk: a small tmpfs (root mount, else a user+mount namespace) -------------------------
newcase tmpfs
MNT=$C/mnt; mkdir -p "$MNT"
cat > "$C/run.sh" <<EOS
set -u
mount -t tmpfs -o size=24m tmpfs "$MNT" || exit 77
cd "$(pwd)" && . ./lib.sh >/dev/null
mkparts "$MNT/d" "$T" \$((6 * $MiB)) $MiB
"$B" reassemble "$MNT/d" > "$C/log" 2>&1; echo "rc=\$?" >> "$C/log"
[ ! -e "$MNT/d/$T" ] && [ ! -e "$MNT/d/$T.partial" ] && echo "clean=yes" >> "$C/log"
umount "$MNT" 2>/dev/null
exit 0
EOS
if [ "$(id -u)" = 0 ] && bash "$C/run.sh" 2>/dev/null; then mounted=1
elif unshare -rm true 2>/dev/null && unshare -rm bash "$C/run.sh" 2>/dev/null; then mounted=1
else mounted=0; fi
if [ $mounted = 1 ] && [ -s "$C/log" ]; then
    check "tmpfs too small: exit 3" grep -q "^rc=3$" "$C/log"
    check "tmpfs too small: message names the free space" grep -q "not enough free space" "$C/log"
    check "tmpfs too small: nothing left behind" grep -q "^clean=yes$" "$C/log"
else
    bad "full-disk case not run: cannot mount a tmpfs here (needs root or user namespaces)"
fi

# --- kill -9 mid-write, then rerun resumes --------------------------------------------------------
newcase kill9
mkparts "$D" "$T" $((6 * MiB)) $MiB
DSFLASH_TEST_BLOCK_BYTES=65536 DSFLASH_TEST_BLOCK_DELAY_MS=15 "$B" reassemble "$D" --quiet > "$LOG" 2>&1 &
pid=$!
for _ in $(seq 1 1500); do
    [ -f "$D/$T.partial.json" ] && [ "$(grep -c '"end"' "$D/$T.partial.json" 2>/dev/null)" -ge 2 ] && break
    sleep 0.02
done
kill -9 $pid; wait $pid 2>/dev/null
check "killed run left no target" [ ! -e "$D/$T" ]
check "killed run left a journal with >= 2 parts" bash -c "[ \$(grep -c '\"end\"' '$D/$T.partial.json') -ge 2 ]"
"$B" reassemble "$D" > "$LOG" 2>&1; expect_rc "rerun after kill -9" 0 $? "$LOG"
check "rerun resumed after the journaled parts" grep -q "^\[info\] $T: resuming after [2-5] of 6 parts" "$LOG"
check "resumed target equals the original" cmp -s "$D/$T" "$C/$T.orig"
check "no temporary files after the rerun" bash -c "[ ! -e '$D/$T.partial' ] && [ ! -e '$D/$T.partial.json' ]"

# kill -9, then the journal disagrees with the bytes (a corrupted T.partial): start over, still right
newcase kill9_corrupt
mkparts "$D" "$T" $((4 * MiB)) $MiB
DSFLASH_TEST_BLOCK_BYTES=65536 DSFLASH_TEST_BLOCK_DELAY_MS=15 "$B" reassemble "$D" --quiet > "$LOG" 2>&1 &
pid=$!
for _ in $(seq 1 1500); do
    [ -f "$D/$T.partial.json" ] && [ "$(grep -c '"end"' "$D/$T.partial.json" 2>/dev/null)" -ge 1 ] && break
    sleep 0.02
done
kill -9 $pid; wait $pid 2>/dev/null
flip_byte "$D/$T.partial" 10
"$B" reassemble "$D" > "$LOG" 2>&1; expect_rc "rerun after kill -9 and a damaged T.partial" 0 $? "$LOG"
check "damaged T.partial discarded" grep -q "^\[info\] $T: discarding .* and starting over" "$LOG"
check "target equals the original" cmp -s "$D/$T" "$C/$T.orig"

# --- SIGTERM: stops at a part boundary, exit 143, rerun resumes ----------------------------------
newcase sigterm
mkparts "$D" "$T" $((6 * MiB)) $MiB
DSFLASH_TEST_BLOCK_BYTES=65536 DSFLASH_TEST_BLOCK_DELAY_MS=15 "$B" reassemble "$D" --quiet > "$LOG" 2>&1 &
pid=$!
for _ in $(seq 1 1500); do
    [ -f "$D/$T.partial.json" ] && [ "$(grep -c '"end"' "$D/$T.partial.json" 2>/dev/null)" -ge 1 ] && break
    sleep 0.02
done
kill -TERM $pid; wait $pid; rc=$?
expect_rc "SIGTERM exit status" 143 $rc "$LOG"
check "STOP line printed" grep -q "^\[STOP\] $T: interrupted" "$LOG"
check "no target, lock released" bash -c "[ ! -e '$D/$T' ] && [ ! -e '$D/$T.lock' ]"
jp=$(grep -c '"end"' "$D/$T.partial.json")
check "T.partial ends exactly at the last journaled part" [ "$(stat -c %s "$D/$T.partial")" = $((jp * MiB)) ]
"$B" reassemble "$D" > "$LOG" 2>&1; expect_rc "rerun after SIGTERM" 0 $? "$LOG"
check "target equals the original" cmp -s "$D/$T" "$C/$T.orig"

# --- two invocations at once ------------------------------------------------------------------
newcase concurrent
mkparts "$D" "$T" $((4 * MiB)) $MiB
DSFLASH_TEST_BLOCK_BYTES=65536 DSFLASH_TEST_BLOCK_DELAY_MS=25 "$B" reassemble "$D" --quiet > "$C/log1" 2>&1 &
pid=$!
for _ in $(seq 1 1500); do [ -e "$D/$T.partial" ] && break; sleep 0.01; done
"$B" reassemble "$D" --quiet > "$C/log2" 2>&1; rc2=$?
wait $pid; rc1=$?
expect_rc "second invocation refused while the first holds the lock" 4 $rc2 "$C/log2"
check "second invocation names the lock" grep -q "$T.lock is held by another process" "$C/log2"
expect_rc "first invocation completes" 0 $rc1 "$C/log1"
check "target equals the original" cmp -s "$D/$T" "$C/$T.orig"
"$B" reassemble "$D" > "$LOG" 2>&1; expect_rc "a later run is fine" 0 $? "$LOG"

# --- several targets, --target selection, unknown target ----------------------------------------
newcase multi
mkparts "$D" a.bin $((2 * MiB + 7)) $MiB
mkparts "$D" b.bin $((1 * MiB + 3)) $MiB
flip_byte "$D/b.bin.part-01-of-02" 1
"$B" reassemble "$D" --target a.bin > "$LOG" 2>&1; expect_rc "--target a.bin only" 0 $? "$LOG"
check "only a.bin built" bash -c "cmp -s '$D/a.bin' '$C/a.bin.orig' && [ ! -e '$D/b.bin' ]"
"$B" reassemble "$D" > "$LOG" 2>&1; expect_rc "one of two targets fails" 1 $? "$LOG"
check "summary counts one failure" grep -q "^reassemble: 1 of 2 targets failed$" "$LOG"
"$B" reassemble "$D" --target nope.bin > "$LOG" 2>&1; expect_rc "unknown --target" 5 $? "$LOG"

# --- malformed PARTS.sha256, missing PARTS.sha256, usage ------------------------------------------
newcase manifest
mkparts "$D" "$T" $((1 * MiB)) $MiB
sed -i '2s/^\(.\)/\U\1/; 2s/^[0-9]/A/' "$D/PARTS.sha256"
"$B" reassemble "$D" > "$LOG" 2>&1; expect_rc "malformed PARTS.sha256" 1 $? "$LOG"
check "message names file and line" grep -q "PARTS.sha256:2: expected '<64 lowercase hex digits>  <file name>'" "$LOG"
"$B" reassemble "$C" > "$LOG" 2>&1; expect_rc "parent directory: uses the manifest one level down" 1 $? "$LOG"
check "parent directory: names the subdirectory's manifest" grep -q "using $D/PARTS.sha256" "$LOG"
mkdir -p "$C/empty"
"$B" reassemble "$C/empty" > "$LOG" 2>&1; expect_rc "missing PARTS.sha256" 5 $? "$LOG"
check "missing PARTS.sha256: says no subdirectory holds one" grep -q "PARTS.sha256: cannot open.*(nor does any subdirectory hold one)" "$LOG"
"$B" reassemble "$D" --checkonly > "$LOG" 2>&1; expect_rc "unknown option" 2 $? "$LOG"
check "usage printed" grep -q "^usage: dsflash reassemble" "$LOG"
"$B" reassemble "$D" --check > "$LOG" 2>&1; expect_rc "abbreviated option is not accepted" 2 $? "$LOG"
"$B" reassemble "$D" --jobs 0 > "$LOG" 2>&1; expect_rc "bad --jobs value" 2 $? "$LOG"
"$B" reassemble "$D" --jobs 4 > "$LOG" 2>&1; expect_rc "--jobs without --check-only (it would be ignored)" 2 $? "$LOG"
check "--jobs refusal says why" grep -q "^dsflash reassemble: --jobs: applies to --check-only only" "$LOG"
"$B" reassemble "$D" --check-only --delete-parts > "$LOG" 2>&1; expect_rc "--check-only with --delete-parts" 2 $? "$LOG"

# --- progress: plain periodic lines when not a terminal, one refreshed line on a terminal --------
newcase progress
mkparts "$D" "$T" $((4 * MiB)) $MiB
DSFLASH_TEST_BLOCK_BYTES=65536 "$B" reassemble "$D" > "$C/out" 2> "$C/err"; rc=$?
expect_rc "progress run" 0 $rc "$C/err"
n=$(grep -c "^\[engram.weight\] part [1-4]/4 .* MiB / 4.0 MiB .*%.*/s  ETA " "$C/err")
check "plain mode prints about one line per 5% ($n lines)" bash -c "[ $n -ge 15 ] && [ $n -le 25 ]"
check "progress stays off stdout" bash -c "! grep -q 'ETA' '$C/out'"
check "sha256 implementation named" grep -q "^reassemble: sha256 via OpenSSL" "$C/out"
rm -f "$D/$T" "$D/$T.verified"
DSFLASH_PROGRESS=tty DSFLASH_TEST_BLOCK_BYTES=65536 DSFLASH_TEST_BLOCK_DELAY_MS=12 "$B" reassemble "$D" > "$C/out" 2> "$C/err"
check "tty mode rewrites one line in place" bash -c "[ \$(tr -cd '\r' < '$C/err' | wc -c) -ge 2 ] && [ \$(wc -l < '$C/err') = 0 ] && grep -q 'ETA' '$C/err'"
rm -f "$D/$T" "$D/$T.verified"
DSFLASH_TEST_BLOCK_BYTES=65536 "$B" reassemble "$D" --quiet > "$C/out" 2> "$C/err"
check "--quiet: no progress, result lines kept" bash -c "[ ! -s '$C/err' ] && grep -q '^\[OK\]' '$C/out'"

rm -rf "$ROOT"
finish
