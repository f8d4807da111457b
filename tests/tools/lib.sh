# Shared helpers for the tools suites: counters, checks, and fixtures built with coreutils
# (split, sha256sum) so that dsflash is always checked against an independent implementation.
set -u
: "${DSFLASH_BIN:=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/build/${BUILD:-release}/dsflash}"
: "${DS_TEST_TMP:=$(mktemp -d)}"
B=$DSFLASH_BIN
PASS=0; FAIL=0
ok()   { PASS=$((PASS + 1)); echo "ok   $1"; }
bad()  { FAIL=$((FAIL + 1)); echo "FAIL $1"; [ -n "${2:-}" ] && echo "     $2"; return 0; }
# check "description" command...   (passes when the command succeeds)
check() { local d=$1; shift; if "$@"; then ok "$d"; else bad "$d" "command: $*"; fi; }
# expect_rc "description" WANT GOT [log file]
expect_rc() {
    if [ "$2" = "$3" ]; then ok "$1 (exit $3)"; else bad "$1" "expected exit $2, got $3${4:+; output:}"; [ -n "${4:-}" ] && sed 's/^/     | /' "$4" | head -20; fi
    return 0
}
finish() { echo "$PASS passed, $FAIL failed"; [ "$FAIL" = 0 ]; }

# mkparts DIR NAME BYTES PART_BYTES [noheader]
#   random file DIR/NAME (kept as DIR/../NAME.orig), cut by coreutils split into
#   NAME.part-NN-of-MM, and DIR/PARTS.sha256 written from sha256sum output.
mkparts() {
    local dir=$1 name=$2 bytes=$3 psz=$4 hdr=${5:-header}
    mkdir -p "$dir"
    head -c "$bytes" /dev/urandom > "$dir/$name"
    cp "$dir/$name" "$dir/../$name.orig"
    local mm=$(( (bytes + psz - 1) / psz ))
    local w=2; [ "$mm" -ge 100 ] && w=${#mm}
    (cd "$dir" && split -b "$psz" -d -a "$w" "$name" "$name.tmpsplit-")
    local i
    for ((i = 0; i < mm; i++)); do
        local nn; nn=$(printf "%0${w}d" "$i")
        mv "$dir/$name.tmpsplit-$nn" "$dir/$name.part-$nn-of-$(printf "%0${w}d" "$mm")"
    done
    {
        [ "$hdr" = header ] && echo "# $name size=$bytes parts=$mm part_size=$psz"
        [ "$hdr" = bare ] && echo "# $name"
        (cd "$dir" && sha256sum "$name")
        for ((i = 0; i < mm; i++)); do
            (cd "$dir" && sha256sum "$name.part-$(printf "%0${w}d" "$i")-of-$(printf "%0${w}d" "$mm")")
        done
    } >> "$dir/PARTS.sha256"
    rm "$dir/$name"
}

# The invariant of every case: the final name is absent or holds exactly the original bytes,
# and no temporary file is left where the case says it must be gone.
target_ok_or_absent() { [ ! -e "$1/$2" ] || cmp -s "$1/$2" "$1/../$2.orig"; }
no_partial() { [ ! -e "$1/$2.partial" ] && [ ! -e "$1/$2.partial.json" ]; }

# Damage one byte for certain: write the complement of the byte at OFFSET of FILE (the files hold
# random bytes, so writing a fixed value instead left them intact one run in 256).
flip_byte() {
    local f=$1 off=$2 b
    b=$(od -An -tu1 -j "$off" -N1 "$f" | tr -d ' ')
    printf "\\x$(printf %02x $((255 - b)))" | dd of="$f" bs=1 seek="$off" conv=notrunc status=none
}
