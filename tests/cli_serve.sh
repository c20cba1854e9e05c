#!/bin/sh
# lowbit serve: the OpenAI client (npm package openai, tests/node) drives
# completions and chat, streaming and not, against lowbit run / lowbit
# tokenize; raw HTTP checks every error status and shape (400, 401, 404,
# 405, 413, 503), disconnect cancellation and SSE framing; malformed HTTP
# framing and oversized headers (one JSON response), the connection guard
# (caps, eviction order, deadlines), chat content with special-token text
# (plain by default, --special-in-content), refused fields and \u0000.
# Needs node and tests/node/node_modules (npm ci, done by scripts/test.sh);
# skipped (77) without them.
set -eu
: "${LOWBIT:?set LOWBIT to the lowbit binary}"
command -v node >/dev/null 2>&1 || { echo "SKIPPED: node is not installed"; exit 77; }
if [ ! -d tests/node/node_modules/openai ]; then
    echo "SKIPPED: run 'npm ci' in tests/node (scripts/test.sh does)"; exit 77
fi
shared=${LB_SHARED:-../shared}
case "$LOWBIT" in /*) ;; *) LOWBIT="$(pwd)/$LOWBIT" ;; esac
case "$shared" in /*) ;; *) shared="$(pwd)/$shared" ;; esac
export LOWBIT LB_SHARED="$shared"
# GGUF serving is tested once this build can load GGUF models
if "$LOWBIT" run "$shared/models/stories260K/stories260K.gguf" -p x -n 1 -q >/dev/null 2>&1; then
    export LB_TEST_GGUF=1
fi
# (each test has its own 2-minute limit in the file: a hung one fails by name)
exec node --test --test-reporter=spec tests/node/serve.test.mjs
