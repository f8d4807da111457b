#!/usr/bin/env bash
# The openai npm client against a live `dsflash serve` (tiny model, loopback, API key on).
set -u
cd "$(dirname "$0")/../.."
. tests/server/serve_lib.sh
if [ ! -d tests/server/node_modules/openai ]; then
    echo "tests/server: the openai package is not installed (run scripts/install-deps.sh)"
    echo "0 passed, 1 failed"; exit 1
fi
LOG=$DS_TEST_TMP/serve-openai.log
if ! start_server "$LOG" --api-key test-key --kv-cache-memory 256MiB; then
    echo "0 passed, 1 failed"; exit 1
fi
"$NODE" tests/server/openai_client.mjs "$BASE" test-key
rc=$?
stop_server
exit $rc
