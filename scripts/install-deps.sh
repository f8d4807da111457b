#!/usr/bin/env bash
# The single source of dsflash's dependencies: Debian packages for building, running and testing,
# and the pinned npm packages that test suites use as independent references.  Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"
DEBS=(build-essential pkg-config libcjson-dev libssl-dev libutf8proc-dev libmicrohttpd-dev
      python3 python3-numpy curl ca-certificates
      time                   # /usr/bin/time: tests/run.sh reports each suite's CPU seconds
      util-linux             # setpriv: tests/cli/run_flags.sh drops CAP_IPC_LOCK to check a refused mlock
      libcurl4-openssl-dev   # the tools' HTTP client (src/tools/http_client.c: bench, needle, gates)
      libxml2-utils          # xmllint: tests validate the SVG that bench-plot writes
      libsimde-dev   # portable AVX-512 intrinsics, so tests check the AVX-512 kernels on any CPU
      openmpi-bin libopenmpi-dev   # tensor/expert parallelism over MPI (src/dist, tests/dist)
      clang libclang-rt-dev)   # libFuzzer + ASan/UBSan runtimes for `make fuzz` (fuzz/); the build stays gcc
missing=()
for p in "${DEBS[@]}"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p"); done
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then missing+=(nodejs npm); fi
if [ ${#missing[@]} -gt 0 ]; then
    echo "install-deps: apt-get install ${missing[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# npm test references and tokenizer corpora inside this checkout (versions and hashes pinned there).
scripts/fetch-test-data.sh
echo "install-deps: ok"
