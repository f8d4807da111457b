#!/usr/bin/env bash
# The per-checkout test data: the npm reference packages (tests/tokenizer, tests/server; versions
# pinned by their package-lock.json) and the tokenizer corpora (tests/tokenizer/fetch-data.sh, sha256
# checked).  Idempotent and quick when everything is present.
#
# Why a script of its own: Debian packages are machine-wide (scripts/install-deps.sh installs them and
# then calls this), but these files live inside the checkout, so a fresh clone on a machine that is
# already set up still needs them; `make test` calls this first, so `git clone && make && make test`
# works there too.
set -euo pipefail
cd "$(dirname "$0")/.."
for d in tests/tokenizer tests/server; do
    if [ -f "$d/package.json" ] && { [ ! -d "$d/node_modules" ] || [ "$d/package-lock.json" -nt "$d/node_modules" ]; }; then
        (cd "$d" && npm ci --no-audit --no-fund --loglevel=error)
    fi
done
[ -x tests/tokenizer/fetch-data.sh ] && tests/tokenizer/fetch-data.sh
