#!/usr/bin/env bash
# `make soak`: the soak test (tests/soak/soak.mjs) for SOAK_SECONDS (default 1800) against the
# tiny model, generated once into build/soak/models.  Not part of `make test` or CI (it is long).
set -u
cd "$(dirname "$0")/../.."
BIN=${DSFLASH_BIN:-$PWD/build/${BUILD:-release}/dsflash}
mkdir -p build/soak/models
exec node tests/soak/soak.mjs "$BIN" "$PWD/build/soak/models" "${SOAK_SECONDS:-1800}" "$PWD/build/soak/serve.log"
